// When to ask compactor for a preparation. Asked at every turn_end, this must say "no" on
// almost every turn.
//
// A preparation costs a summary request; one that is never used is money thrown away, and
// one that lands after Pi compacted is worse (Pi then pays for its own summary too). So the
// extension asks once per compaction cycle (the span between two compactions of the
// branch), just in time: when the context, growing at the pace the agent works, would reach
// Pi's threshold within the time a preparation takes (learned from earlier preparations),
// with a safety margin. The gap between that preparation's cut and the cut Pi makes later
// is bridged without a model at hook time (compactor's bridge), so an early preparation
// costs no extra request. A second request in the cycle (a top-up) is made only when the
// context grew a lot since the first and there is still time for it to land before the
// threshold. Never below a floor (a fraction of the threshold), and always by a backstop
// fraction, whatever the pace says.

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

/** The last request compactor accepted (or already had pending) for this session. */
export interface LastAsk {
	leafId: string;
	tokens: number;
	compactionId: string | null;
	/** Requests made in this compaction cycle, this one included. */
	asks: number;
}

/** What the extension has learned of the agent and of compactor (see Pace). */
export interface PaceEstimate {
	/** Context growth while the agent works, tokens per second (undefined: not known yet). */
	tokensPerSecond: number | undefined;
	/** The largest growth of one turn seen lately, in tokens. */
	maxTurnTokens: number;
	/** How long a preparation takes from request to value, in ms. */
	latencyMs: number;
}

export interface Knobs {
	/** Floor: no request below this fraction of the threshold. */
	fraction: number;
	/** Growth since the cycle's first request, as a fraction of the threshold, that justifies a top-up. */
	step: number;
}

/** Backstop: past this fraction of the threshold a cycle's first request is made whatever the pace. */
export const BACKSTOP_FRACTION = 0.85;
/** Requests per compaction cycle: the first one and at most one top-up. */
export const MAX_ASKS_PER_CYCLE = 2;
/** The margin on the learned latency: a preparation must land before the threshold, not at it. */
export const SAFETY = 1.5;

export interface Decision {
	ask: boolean;
	why: string;
	/** The request would be the cycle's n-th (1 or 2) when ask is true. */
	nth?: number;
}

/** shouldAsk decides; pure, so the rules are tested without Pi or NATS. */
export function shouldAsk(last: LastAsk | undefined, s: Snapshot, pace: PaceEstimate, k: Knobs): Decision {
	const window = s.contextWindow ?? 0;
	const threshold = window - s.reserveTokens;
	if (s.tokens === null || s.tokens === undefined || !(s.tokens > 0)) return { ask: false, why: "context size unknown" };
	if (!(threshold > 0)) return { ask: false, why: `no threshold (window ${window}, reserve ${s.reserveTokens})` };
	const tokens = s.tokens;
	const floor = k.fraction * threshold;
	if (tokens < floor) return { ask: false, why: `${tokens} tokens < ${Math.ceil(floor)} (${k.fraction} of ${threshold})` };
	if (s.leafId === null) return { ask: false, why: "no leaf" };
	if (last !== undefined && last.leafId === s.leafId) return { ask: false, why: "already asked at this leaf" };
	let asks = 0;
	if (last !== undefined) {
		const b = s.branch();
		if (last.compactionId === b.latestCompactionId && b.onBranch(last.leafId)) asks = last.asks;
		// else: compacted since, or the branch left the leaf asked at: a new cycle.
	}
	const lead = leadTokens(pace);
	const projected = `${tokens} + ${lead} tokens in ${(SAFETY * pace.latencyMs / 1000).toFixed(1)} s`;
	if (asks === 0) {
		if (tokens >= BACKSTOP_FRACTION * threshold) return { ask: true, nth: 1, why: `${tokens} tokens >= ${BACKSTOP_FRACTION} of ${threshold}` };
		if (pace.tokensPerSecond === undefined) return { ask: true, nth: 1, why: `${tokens} tokens >= ${Math.ceil(floor)}, pace not known yet` };
		if (tokens + lead >= threshold) return { ask: true, nth: 1, why: `due: ${projected} >= ${threshold}` };
		return { ask: false, why: `not due: ${projected} < ${threshold}` };
	}
	if (asks >= MAX_ASKS_PER_CYCLE) return { ask: false, why: `${asks} requests in this cycle already` };
	const grew = tokens - (last as LastAsk).tokens;
	const step = k.step * threshold;
	if (grew < step) return { ask: false, why: `grew by ${grew} < ${Math.ceil(step)} tokens since the last request` };
	if (pace.tokensPerSecond === undefined || tokens + lead >= threshold) {
		return { ask: false, why: `grew by ${grew} tokens, but a top-up would land too late (${projected})` };
	}
	return { ask: true, nth: asks + 1, why: `top-up: grew by ${grew} tokens, and ${projected} < ${threshold}` };
}

/** leadTokens is how much the context may grow while a preparation is being made. */
function leadTokens(p: PaceEstimate): number {
	const byPace = p.tokensPerSecond === undefined ? 0 : (p.tokensPerSecond * SAFETY * p.latencyMs) / 1000;
	return Math.ceil(Math.max(byPace, p.maxTurnTokens));
}

/**
 * Pace learns the agent's working pace from turn_end samples, and compactor's latency from
 * the preparations the hook reads. Only growth within one agent run counts (agent_start
 * resets the clock): the time a user takes to write the next prompt adds no tokens, and
 * counting it would make the agent look slower than it is, and the request late.
 */
export class Pace {
	#rate: number | undefined;
	#turns: number[] = [];
	#latency: number;
	#learned = false;
	#last: { tokens: number; at: number } | undefined;

	constructor(initialLatencyMs: number) {
		this.#latency = initialLatencyMs;
	}

	/** runStarted forgets the previous sample: the time since it was not working time. */
	runStarted(): void {
		this.#last = undefined;
	}

	/** compacted forgets the previous sample: the context shrank. */
	compacted(): void {
		this.#last = undefined;
	}

	/** turnEnded records the context size at the end of a turn, at time nowMs. */
	turnEnded(tokens: number | null | undefined, nowMs: number): void {
		if (typeof tokens !== "number" || !(tokens > 0)) return;
		const prev = this.#last;
		this.#last = { tokens, at: nowMs };
		if (!prev || tokens <= prev.tokens || nowMs <= prev.at) return;
		const grew = tokens - prev.tokens;
		const rate = (grew * 1000) / (nowMs - prev.at);
		this.#rate = this.#rate === undefined ? rate : 0.7 * this.#rate + 0.3 * rate;
		this.#turns.push(grew);
		if (this.#turns.length > 8) this.#turns.shift();
	}

	/** preparationTook records how long a preparation took from request to value. */
	preparationTook(ms: number): void {
		if (!(ms > 0) || ms > 10 * 60_000) return; // a clock skewed between machines: ignore
		// The first measurement replaces the configured guess; later ones are averaged in.
		this.#latency = this.#learned ? 0.5 * this.#latency + 0.5 * ms : ms;
		this.#learned = true;
	}

	estimate(): PaceEstimate {
		return { tokensPerSecond: this.#rate, maxTurnTokens: this.#turns.length ? Math.max(...this.#turns) : 0, latencyMs: this.#latency };
	}
}
