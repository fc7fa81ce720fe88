// When to ask compactor for a preparation. Asked at every turn_end, this must say "no" on
// almost every turn, and say why in one line when asked.
//
// Readiness comes first. Pi's hook bridges whatever preparation it finds to the cut Pi makes
// then (compactor's bridge: the entries between the two cuts as extractive notes, in
// milliseconds), so a preparation made early in a compaction cycle (the span between two
// compactions of the branch) serves as well as one made late, as long as it is ready when
// Pi compacts and builds on the branch's latest compaction. So each cycle gets:
//
//   1. a first preparation as soon as Pi would summarize something worth it (a fraction of
//      the cycle's room is summarizable): it lands long before the threshold even when a
//      summary takes a minute, and it is small (the span is short) and so cheap;
//   2. at most one top-up, the latest one that still lands before the threshold at the
//      agent's pace: it summarizes most of the span with the model, so the bridge has little
//      left to cover. It is never needed for readiness, so it is made only when it can land.
//
// At most two requests per cycle, whatever the timing. Where no preparation can land before
// Pi compacts (the agent fills the room faster than a summary is made, as learned from the
// pace and from earlier preparations), nothing is asked: nothing is spent on a preparation
// that would arrive after the compaction it was for (Pi's hook then answers from the
// previous summary plus extractive notes, or Pi compacts by itself).
//
// Only one preparation per session is pending at a time (compactor's queue keeps one job per
// session), so a request is in flight from the moment it is published until its value lands.

/** What the extension sees at turn_end. */
export interface Snapshot {
	/** ctx.getContextUsage().tokens (null right after a compaction, until the model answers). */
	tokens: number | null | undefined;
	contextWindow: number | undefined;
	reserveTokens: number;
	keepRecentTokens: number;
	leafId: string | null;
	/** The latest compaction on the branch (null: none): which cycle this is. */
	compactionId: string | null;
	/** The tokens Pi would summarize if it compacted now (computed only when needed). */
	summarizable: () => number;
	/** How long (wall time) the last complete cycle took, from one compaction to the next; undefined before one. */
	lastCycleMs: number | undefined;
}

/** What the extension has learned of the agent and of compactor (see Pace). */
export interface PaceEstimate {
	/** Context growth while the agent works, tokens per second (undefined: not known yet). */
	tokensPerSecond: number | undefined;
	/** The largest growth of one turn seen lately, in tokens. */
	maxTurnTokens: number;
	/** How long a preparation takes from request to value, in ms. */
	latencyMs: number;
	/** Whether latencyMs was measured (false: still the configured guess). */
	latencyMeasured: boolean;
}

export interface Knobs {
	/** The first preparation of a cycle once this fraction of the cycle's room is summarizable. */
	start: number;
	/** A top-up only when the context grew by this fraction of the room since the first request. */
	step: number;
}

/** Requests per compaction cycle: the first one and at most one top-up. */
export const MAX_ASKS_PER_CYCLE = 2;
/** The margin on the learned latency: a top-up must land before the threshold, not at it. */
export const SAFETY = 1.5;
/** The first preparation needs at least this many tokens to summarize, whatever the fraction. */
export const MIN_START_TOKENS = 500;
/** A request whose value never showed up is given up after this many latencies (at least LOST_AFTER_MIN_MS). */
export const LOST_AFTER_LATENCIES = 2;
/** ... and never before this (a guess of the latency that is far too small). */
export const LOST_AFTER_MIN_MS = 10_000;

/** The request in flight: published, its value not seen yet. */
export interface InFlight {
	/** The job's requestedAt, in ms since the epoch (the value carries it back). */
	requestedAt: number;
	/** performance.now() when it was published. */
	at: number;
	leafId: string;
	nth: number;
	/** The cycle it was asked for: the latest compaction on the branch then. */
	compactionId: string | null;
	/** The job's id and its sequence in COMPACTOR_JOBS: its result event names both. */
	jobId?: string;
	jobSeq?: number;
	/** How its landing is learnt: from its result event, or by reading the bucket (src/landing.ts). */
	heardBy?: "event" | "poll";
}

/** One compaction cycle of the branch, as far as the trigger is concerned. */
export interface Cycle {
	compactionId: string | null;
	/** Requests made in this cycle. */
	asks: number;
	/** The context size at the cycle's first request. */
	firstTokens?: number;
	/** The leaf of the cycle's last request. */
	lastLeafId?: string;
}

export interface Decision {
	ask: boolean;
	why: string;
	/** The request would be the cycle's n-th (1 or 2) when ask is true. */
	nth?: number;
}

/** shouldAsk decides; pure, so the rules are tested without Pi or NATS. */
export function shouldAsk(cycle: Cycle, inFlight: InFlight | undefined, s: Snapshot, pace: PaceEstimate, k: Knobs, nowMs: number): Decision {
	const window = s.contextWindow ?? 0;
	const threshold = window - s.reserveTokens;
	if (s.tokens === null || s.tokens === undefined || !(s.tokens > 0)) return { ask: false, why: "context size unknown" };
	if (!(threshold > 0)) return { ask: false, why: `no threshold (window ${window}, reserve ${s.reserveTokens})` };
	if (s.leafId === null) return { ask: false, why: "no leaf" };
	const tokens = s.tokens;
	const asks = cycle.compactionId === s.compactionId ? cycle.asks : 0;
	if (inFlight !== undefined) {
		return { ask: false, why: `a preparation requested ${secs(nowMs - inFlight.at)} ago is in flight` };
	}
	if (asks >= MAX_ASKS_PER_CYCLE) return { ask: false, why: `${asks} requests in this cycle already` };
	if (cycle.compactionId === s.compactionId && cycle.lastLeafId === s.leafId) return { ask: false, why: "already asked at this leaf" };
	const room = Math.max(threshold - s.keepRecentTokens, 1);
	const rate = pace.tokensPerSecond;
	const toGo = threshold - tokens;
	const lead = rate === undefined ? undefined : (rate * SAFETY * pace.latencyMs) / 1000;
	if (asks === 0) {
		const need = Math.max(MIN_START_TOKENS, Math.ceil(k.start * room));
		// Cheap bound first: the messages are never more than Pi's whole count.
		if (tokens < s.keepRecentTokens + need) return { ask: false, why: `${tokens} tokens: too few to summarize ${need}` };
		const summarizable = s.summarizable();
		if (summarizable < need) return { ask: false, why: `${summarizable} tokens to summarize < ${need} (${k.start} of ${room})` };
		// Where the last cycle was shorter than a preparation takes and the agent's pace says this
		// one will be too, a preparation would land after the compaction it is for. (The pace
		// counts working time only; the cycle's wall time counts the user's pauses too, during
		// which a preparation can land: both must say no.)
		const tooFast =
			pace.latencyMeasured && rate !== undefined && rate > 0 && (toGo * 1000) / rate < pace.latencyMs && s.lastCycleMs !== undefined && s.lastCycleMs < pace.latencyMs;
		if (tooFast) {
			return {
				ask: false,
				why: `no preparation can land before Pi compacts: ${toGo} tokens to go at ${Math.round(rate)} tokens/s is ${secs((toGo * 1000) / rate)}, the last cycle took ${secs(s.lastCycleMs ?? 0)}, a preparation takes ${secs(pace.latencyMs)}`,
			};
		}
		return { ask: true, nth: 1, why: `${summarizable} tokens to summarize >= ${need}, ${toGo} tokens before the threshold` };
	}
	const grew = tokens - (cycle.firstTokens ?? tokens);
	const step = Math.ceil(k.step * room);
	if (grew < step) return { ask: false, why: `grew by ${grew} < ${step} tokens since the first request` };
	if (!pace.latencyMeasured || rate === undefined || lead === undefined) {
		return { ask: false, why: "no top-up before the pace and the latency are known" };
	}
	const projected = `${tokens} + ${Math.ceil(lead)} tokens in ${secs(SAFETY * pace.latencyMs)}`;
	if (tokens + lead >= threshold) return { ask: false, why: `a top-up would land too late (${projected} >= ${threshold})` };
	// The latest turn that still lands: after one more turn of the largest size seen, it would not.
	if (tokens + lead + pace.maxTurnTokens < threshold) {
		return { ask: false, why: `top-up later (${projected}, + a turn of ${pace.maxTurnTokens} < ${threshold})` };
	}
	return { ask: true, nth: asks + 1, why: `top-up: grew by ${grew} tokens, and ${projected} < ${threshold}` };
}

function secs(ms: number): string {
	return `${(ms / 1000).toFixed(1)} s`;
}

/**
 * Pace learns the agent's working pace from turn_end samples, and compactor's latency from
 * the preparations seen landing. Every turn's growth counts, the first one of a run
 * included: agent_start sets the base the first turn is measured from (the time a user takes
 * to write the next prompt is not working time, so the clock does not run between runs), and
 * a compaction sets the base to the compacted context.
 */
export class Pace {
	#rate: number | undefined;
	#turns: number[] = [];
	#latency: number;
	#learned = false;
	#last: { tokens: number | undefined; at: number } | undefined;

	constructor(initialLatencyMs: number) {
		this.#latency = initialLatencyMs;
	}

	/** runStarted: the agent starts working at nowMs with a context of tokens (if known). */
	runStarted(tokens: number | null | undefined, nowMs: number): void {
		this.#last = { tokens: typeof tokens === "number" && tokens > 0 ? tokens : this.#last?.tokens, at: nowMs };
	}

	/** compacted: the context was compacted to tokens (Pi's estimate of what it rebuilt) at nowMs. */
	compacted(tokens: number | undefined, nowMs: number): void {
		this.#last = { tokens: typeof tokens === "number" && tokens > 0 ? tokens : undefined, at: nowMs };
	}

	/** turnEnded records the context size at the end of a turn, at time nowMs. */
	turnEnded(tokens: number | null | undefined, nowMs: number): void {
		if (typeof tokens !== "number" || !(tokens > 0)) return;
		const prev = this.#last;
		this.#last = { tokens, at: nowMs };
		if (!prev || prev.tokens === undefined || tokens <= prev.tokens || nowMs <= prev.at) return;
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
		return {
			tokensPerSecond: this.#rate,
			maxTurnTokens: this.#turns.length ? Math.max(...this.#turns) : 0,
			latencyMs: this.#latency,
			latencyMeasured: this.#learned,
		};
	}
}

/** lostAfterMs is when a request in flight is given up (its job was skipped or lost). */
export function lostAfterMs(pace: PaceEstimate): number {
	// Giving up early costs nothing: a request made again while the job is still pending is
	// refused by compactor's queue (one job per session) and kept as the one in flight.
	return Math.max(LOST_AFTER_MIN_MS, LOST_AFTER_LATENCIES * pace.latencyMs);
}
