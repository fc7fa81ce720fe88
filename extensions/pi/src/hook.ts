// Pi's session_before_compact hook: hand Pi the prepared summary when one is valid for the
// branch Pi compacts now. It reads the session's prepared value (bounded by the deadline),
// checks it, bridges it to Pi's cut when its cut lies before Pi's, and with none valid, for an
// automatic compaction, asks a worker for the extract. Anything else returns nothing, and Pi
// compacts as it always does. Each run ends in one debug line and one report (metrics.ts).

import type { ExtensionContext, SessionBeforeCompactEvent } from "@earendil-works/pi-coding-agent";
import { type CompactorClient, type Deadlined, withDeadline } from "./client.ts";
import type { Config } from "./config.ts";
import { errText, failureText } from "./debug.ts";
import type { HookState } from "./hookstate.ts";
import { reportHook } from "./metrics.ts";
import { noteValue } from "./landing.ts";
import { type AtHook, bridgeable, bridgeToPiCut, check, extract } from "./bridge.ts";
import { type HookReason, type HookReport, type HookResult, preparedKey, type SessionLocation, type ValueMaking, valueMaking } from "./session.ts";
import { latestCompactionId, location, type Runtime, type SessionState } from "./state.ts";
import type { CheckResult, PreparedCompaction, Refusal } from "./validate.ts";


/** HookRun is one run's state, moved only by its named transitions. */
export class HookRun {
	readonly s: HookState = { outcome: "skipped", kind: undefined, result: "pi", reasonCode: "error", loc: undefined, bridged: undefined, timing: "", making: {} };

	/** notInStore: the session file lies in none of the configured stores (or is not written yet). */
	notInStore(): void {
		this.s.outcome = "miss (session in no store)";
		this.s.reasonCode = "no-store";
	}

	/** located: compactor will be asked; a miss until something better is found. */
	located(loc: SessionLocation): void {
		this.s.loc = loc;
		this.s.kind = "miss";
	}

	/** unreachable: the bucket could not be read in time. */
	unreachable(got: Deadlined<unknown> & { ok: false }): void {
		this.s.outcome = `miss (${failureText(got)})`;
		if (got.reason === "error") this.s.kind = "error";
		this.s.reasonCode = "nats";
	}

	/** nothingPrepared: the bucket has no value for the session. */
	nothingPrepared(cycleInFlight: boolean): void {
		this.s.outcome = "miss (nothing prepared)";
		this.s.reasonCode = cycleInFlight ? "not-ready" : "not-prepared";
	}

	/** valueRead: a value was read; timing says when it was asked for and made. */
	valueRead(timing: string): void {
		this.s.timing = timing;
	}

	/** bridgeFailed: the bridge gave no usable value (the value read may still answer). */
	bridgeFailed(reasonCode: HookReason): void {
		this.s.reasonCode = reasonCode;
	}

	/** bridgedTo: the bridge gave a value that passed the checks. */
	bridgedTo(making: ValueMaking, entries: number): void {
		this.s.making = making;
		this.s.bridged = entries;
	}

	/** stale: no value read or bridged passed the checks. */
	stale(r: CheckResult & { ok: false }, bridge: string, cycleInFlight: boolean): void {
		this.s.kind = "stale";
		this.s.outcome = `stale (${r.refusal}: ${r.detail}${bridge ? `; ${bridge}` : ""})`;
		if (!bridge) this.s.reasonCode = reasonOf(r.refusal, cycleInFlight);
	}

	/** prepared: a preparation answers Pi. */
	prepared(r: CheckResult & { ok: true }, value: unknown, bridge: string, event: SessionBeforeCompactEvent): void {
		this.s.kind = "hit";
		this.s.result = "prepared";
		this.s.reasonCode = "none";
		if (this.s.bridged === undefined) this.s.making = valueMaking(value);
		this.s.outcome = `hit (firstKept ${r.compaction.firstKeptEntryId}${sameCut(r, event)}, summary ${r.summaryTokens} + kept ${r.keptTokens} <= ${r.threshold} tokens${bridge ? `; ${bridge}` : ""})`;
	}

	/** extractTried: the extract was asked for; text says how it went. */
	extractTried(text: string): void {
		this.s.outcome += `; extract ${text}`;
	}

	/** extracted: the extract answers Pi. */
	extracted(making: ValueMaking | undefined): void {
		this.s.kind = "hit";
		this.s.result = "extract";
		this.s.making = making ?? {};
	}

	/** abortedAtHit: Pi aborted the compaction before the preparation was handed over; nothing is reported. */
	abortedAtHit(): void {
		this.s.kind = undefined;
		this.s.outcome = "aborted";
	}

	/** abortedAtExtract: Pi aborted the compaction before the extract was handed over; nothing is reported. */
	abortedAtExtract(): void {
		this.s.kind = undefined;
		this.s.outcome += "; aborted";
	}

	/** failed: something threw; Pi compacts by itself. */
	failed(err: unknown): void {
		this.s.kind = "error";
		this.s.reasonCode = "error";
		this.s.outcome = `error (${errText(err)})`;
	}
}

/** What the hook hands Pi: a compaction Pi appends as its own. */
type Answer = { compaction: PreparedCompaction } | undefined;

/** beforeCompact is the session_before_compact handler: it never throws into Pi. */
export async function beforeCompact(rt: Runtime, event: SessionBeforeCompactEvent, ctx: ExtensionContext): Promise<Answer> {
	const t0 = performance.now();
	const ev = event as SessionBeforeCompactEvent & { reason?: string; willRetry?: boolean }; // Pi 0.73: neither
	const run = new HookRun();
	const piReason = ev.reason ?? inferReason(ctx, event);
	try {
		return await answer(rt, run, event, ctx, t0, piReason);
	} catch (err) {
		run.failed(err);
		return undefined;
	} finally {
		reportHook(rt, run.s, { ms: performance.now() - t0, piReason, willRetry: ev.willRetry === true, event, ctx });
	}
}

/** answer looks for a valid preparation, then (for an automatic compaction) for the extract. */
async function answer(rt: Runtime, run: HookRun, event: SessionBeforeCompactEvent, ctx: ExtensionContext, t0: number, piReason: string): Promise<Answer> {
	const { cfg: c, client, state: st } = rt;
	if (!c || !client || !st) return undefined;
	const remaining = () => c.deadlineMs - (performance.now() - t0);
	const loc = await location(rt, st);
	if (!loc) {
		run.notInStore();
		return undefined;
	}
	run.located(loc);
	const at: AtHook = { st, loc, event, ctx };
	const got = await withDeadline(client.getPrepared(preparedKey(loc)), remaining(), event.signal);
	let found: Judged | undefined;
	if (got.ok) found = await judgePrepared(rt, client, run, at, got.value, remaining);
	else run.unreachable(got);
	if (found?.r.ok) {
		if (event.signal.aborted) {
			run.abortedAtHit();
			return undefined;
		}
		run.prepared(found.r, found.value, found.bridge, event);
		return { compaction: found.r.compaction };
	}
	// No preparation is valid for this branch. An automatic compaction is answered from
	// the previous summary plus extractive notes, made by a worker in milliseconds; /compact
	// (the user asked for a summary) and anything NATS could not reach go to Pi.
	if (c.extract && run.s.reasonCode !== "nats" && (piReason === "threshold" || piReason === "overflow") && !event.signal.aborted) {
		return answerWithExtract(c, client, run, at);
	}
	return undefined;
}

/** What judgePrepared found: the check of the value read (or of its bridge), and the bridge's words. */
interface Judged {
	r: CheckResult;
	value: unknown;
	bridge: string;
}

/** judgePrepared checks the value read (none: undefined) and, when its cut lies before Pi's, bridges it. */
async function judgePrepared(rt: Runtime, cl: CompactorClient, run: HookRun, at: AtHook, value: unknown, remaining: () => number): Promise<Judged | undefined> {
	const { st, event } = at;
	if (value === undefined) {
		run.nothingPrepared(inFlightForThisCycle(st, event));
		return undefined;
	}
	run.valueRead(noteValue(rt, st, value));
	let r = check(at, value);
	let bridge = "";
	// A preparation is older than this compaction: its cut lies before Pi's. Bridged to
	// Pi's cut, the compaction keeps what Pi's own would keep.
	if (bridgeable(r, value, event)) {
		const b = await bridgeToPiCut(cl, at, remaining());
		bridge = b.text;
		if (b.ok) {
			r = b.result;
			run.bridgedTo(b.making, b.entries);
		} else run.bridgeFailed(b.reasonCode);
	}
	if (!r.ok) run.stale(r, bridge, inFlightForThisCycle(st, event));
	return { r, value, bridge };
}

/** answerWithExtract asks a worker for the extract and hands it to Pi when it passes the checks. */
async function answerWithExtract(c: Config, cl: CompactorClient, run: HookRun, at: AtHook): Promise<Answer> {
	const ex = await extract(c, cl, at);
	run.extractTried(ex.text);
	if (!ex.result?.ok) return undefined;
	if (at.event.signal.aborted) {
		run.abortedAtExtract();
		return undefined;
	}
	run.extracted(ex.making);
	return { compaction: ex.result.compaction };
}

/**
 * inferReason is Pi 0.73's reason for compacting, which its event does not carry: Pi
 * compacts by itself only past its threshold, and a user's /compact usually comes before it.
 */
function inferReason(ctx: ExtensionContext, event: SessionBeforeCompactEvent): string {
	if (event.customInstructions !== undefined) return "manual";
	const tokens = ctx.getContextUsage()?.tokens;
	const window = ctx.model?.contextWindow ?? 0;
	return typeof tokens === "number" && window > 0 && tokens > window - event.preparation.settings.reserveTokens ? "threshold" : "manual";
}

/** inFlightForThisCycle: a preparation asked for in the cycle Pi now compacts had not landed. */
function inFlightForThisCycle(st: SessionState, event: SessionBeforeCompactEvent): boolean {
	return st.inFlight !== undefined && st.inFlight.compactionId === latestCompactionId(event.branchEntries);
}

/** reasonOf is the word for a refusal of the prepared value. */
function reasonOf(refusal: Refusal, cycleInFlight: boolean): HookReason {
	switch (refusal) {
		case "previous-compaction":
			// the value is an earlier cycle's: this cycle's own had not landed (or was never asked for)
			return cycleInFlight ? "not-ready" : "other-compaction";
		case "leaf-off-branch":
		case "cut-off-branch":
		case "cut-after-leaf":
		case "cut-before-boundary":
		case "cut-on-tool-result":
			return "stale-leaf";
		case "instructions":
			return "instructions";
		case "pi-version":
			return "other-pi";
		case "entries-differ":
			return "entries-differ";
		case "too-big":
			return "too-big";
		default:
			return "malformed";
	}
}

function sameCut(r: CheckResult & { ok: true }, event: SessionBeforeCompactEvent): string {
	return r.compaction.firstKeptEntryId === event.preparation.firstKeptEntryId ? " = Pi's cut" : ` (Pi's: ${event.preparation.firstKeptEntryId})`;
}
