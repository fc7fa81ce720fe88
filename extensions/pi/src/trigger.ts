// When to ask compactor for a preparation. Asked at every turn_end, this must say "no" on
// almost every turn: once the context passes a fraction of Pi's compaction threshold it asks
// once, then again only when what it asked for can no longer be used or is getting old:
// a compaction happened since, the branch moved away from the leaf it asked at, or the
// context grew by a step since.

/** What the extension sees at turn_end. */
export interface Snapshot {
	/** ctx.getContextUsage().tokens (null right after a compaction, until the next answer). */
	tokens: number | null | undefined;
	contextWindow: number | undefined;
	reserveTokens: number;
	leafId: string | null;
	/** The branch, computed only when the decision needs it (walking it costs a little). */
	branch: () => BranchInfo;
}

export interface BranchInfo {
	latestCompactionId: string | null;
	/** Whether an entry id is on the current branch. */
	onBranch: (id: string) => boolean;
}

/** The last request that compactor accepted (or already had pending) for this session. */
export interface LastAsk {
	leafId: string;
	tokens: number;
	compactionId: string | null;
}

export interface Knobs {
	/** Fraction of the threshold where preparing starts. */
	fraction: number;
	/** Growth, as a fraction of the threshold, that justifies a new preparation. */
	step: number;
}

export interface Decision {
	ask: boolean;
	why: string;
}

/** shouldAsk decides; pure, so the rules are tested without Pi or NATS. */
export function shouldAsk(last: LastAsk | undefined, s: Snapshot, k: Knobs): Decision {
	const window = s.contextWindow ?? 0;
	const threshold = window - s.reserveTokens;
	if (s.tokens === null || s.tokens === undefined || !(s.tokens > 0)) return { ask: false, why: "context size unknown" };
	if (!(threshold > 0)) return { ask: false, why: `no threshold (window ${window}, reserve ${s.reserveTokens})` };
	const start = k.fraction * threshold;
	if (s.tokens < start) return { ask: false, why: `${s.tokens} tokens < ${Math.ceil(start)} (${k.fraction} of ${threshold})` };
	if (s.leafId === null) return { ask: false, why: "no leaf" };
	if (last === undefined) return { ask: true, why: `${s.tokens} tokens >= ${Math.ceil(start)}` };
	if (last.leafId === s.leafId) return { ask: false, why: "already asked at this leaf" };
	const b = s.branch();
	if (last.compactionId !== b.latestCompactionId) return { ask: true, why: "compacted since the last request" };
	if (!b.onBranch(last.leafId)) return { ask: true, why: "the branch left the leaf of the last request" };
	const grew = s.tokens - last.tokens;
	const step = k.step * threshold;
	if (grew >= step) return { ask: true, why: `grew by ${grew} tokens since the last request` };
	return { ask: false, why: `grew by ${grew} < ${Math.ceil(step)} tokens since the last request` };
}
