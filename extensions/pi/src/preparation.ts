// Asking for a preparation. At each turn_end the trigger (trigger.ts) says whether one is due;
// if so a prepare job is published (never waited for), and the request stays in flight until
// it lands (landing.ts) or is given up. The pace learns from each landing how long a
// preparation takes.

import type { ExtensionContext, SessionEntry } from "@earendil-works/pi-coding-agent";
import type { CompactorClient } from "./client.ts";
import type { Config } from "./config.ts";
import { contextEntries, preparableTokens } from "./context.ts";
import { clock, errText, secs } from "./debug.ts";
import { entryMessages, estimate, host, project } from "./host.ts";
import { has } from "./rules.ts";
import { followEvents, pollInFlight, requested } from "./landing.ts";
import { prepareJob, prepareSubject } from "./session.ts";
import { latestCompactionId, location, type Runtime, type SessionState } from "./state.ts";
import { type Decision, lostAfterMs, type PaceEstimate, shouldAsk } from "./trigger.ts";

/** turnEnded (turn_end): learn the pace, follow the request in flight, ask when one is due. */
export function turnEnded(rt: Runtime, ctx: ExtensionContext): void {
	try {
		const { cfg, client, state: st } = rt;
		if (!cfg || !client || !st) return;
		const now = performance.now();
		st.pace.turnEnded(ctx.getContextUsage()?.tokens, now);
		// The agent is working: have the connection ready before Pi ever compacts.
		client.warm();
		if (st.inFlight) {
			if (now - st.inFlight.at > lostAfterMs(st.pace.estimate())) {
				rt.log(`prepare requested at ${clock(st.inFlight.requestedAt)} never landed in ${secs(now - st.inFlight.at)}: given up (skipped by the worker, or lost)`);
				st.inFlight = undefined;
			} else pollInFlight(rt, client, st, now);
		}
		if (!st.asking) askIfDue(rt, cfg, client, st, ctx, now);
	} catch (err) {
		rt.log(`turn_end: ${errText(err)}`);
	}
}

/** What a turn_end looked at to decide: the branch's leaf and cycle, and the context's size. */
interface TurnView {
	leafId: string | null;
	compactionId: string | null;
	tokens: number | null | undefined;
	pace: PaceEstimate;
	decision: Decision;
}

/** askIfDue publishes a prepare job when the trigger says so; it never waits for NATS. */
function askIfDue(rt: Runtime, c: Config, cl: CompactorClient, st: SessionState, ctx: ExtensionContext, now: number): void {
	const view = decide(c, st, ctx, now);
	const { decision, leafId, tokens } = view;
	const why = decision.why.replace(/[\d.]+/g, "#");
	if (!decision.ask) {
		if (why !== st.lastWhy) rt.log(`turn_end: no request (${decision.why})`);
		st.lastWhy = why;
		return;
	}
	st.lastWhy = "";
	if (leafId === null || typeof tokens !== "number") return;
	st.asking = true;
	void publish(rt, cl, st, view, leafId, tokens)
		.catch((err) => rt.log(`prepare request failed: ${errText(err)}`))
		.finally(() => {
			st.asking = false;
		});
}

/** decide asks the trigger whether a preparation is due now, starting a new cycle when the branch has one. */
function decide(c: Config, st: SessionState, ctx: ExtensionContext, now: number): TurnView {
	const usage = ctx.getContextUsage();
	const leafId = ctx.sessionManager.getLeafId();
	let path: SessionEntry[] | undefined;
	const branch = () => (path ??= ctx.sessionManager.getBranch());
	const compactionId = latestCompactionId(branch());
	if (st.cycle.compactionId !== compactionId) st.cycle = { compactionId, asks: 0 };
	const pace = st.pace.estimate();
	const decision = shouldAsk(
		st.cycle,
		st.inFlight,
		{
			tokens: usage?.tokens,
			contextWindow: usage?.contextWindow ?? ctx.model?.contextWindow,
			reserveTokens: st.piSettings.reserveTokens,
			keepRecentTokens: st.piSettings.keepRecentTokens,
			leafId,
			compactionId,
			// what a worker would prepare now (0 in the middle of a turn Pi 0.73 could not cut)
			summarizable: () =>
				preparableTokens(contextEntries(branch(), project, entryMessages), st.piSettings.keepRecentTokens, estimate, has(host.VERSION, "TrailingToolResultsKeepLastCut")),
			lastCycleMs: st.lastCycleMs,
		},
		pace,
		{ start: c.prepareFraction, step: c.prepareStep },
		now,
	);
	return { leafId, compactionId, tokens: usage ? usage.tokens : undefined, pace, decision };
}

/** publish sends the prepare job and, once stored, puts the request in flight. */
async function publish(rt: Runtime, cl: CompactorClient, st: SessionState, view: TurnView, leafId: string, tokens: number): Promise<void> {
	const { decision, compactionId, pace } = view;
	const nth = decision.nth ?? 1;
	const loc = await location(rt, st);
	if (!loc) {
		rt.log(`prepare: ${st.file} is in none of the stores (or not written yet)`);
		return;
	}
	// heard before the job is published, so that a fast worker's event is not missed
	await followEvents(rt, cl, st, loc);
	const at = new Date();
	const job = prepareJob(loc, leafId, undefined, st.piSettings.keepRecentTokens, at, host.VERSION);
	const { outcome, seq } = await cl.prepare(prepareSubject(loc), job);
	if (outcome === "pending") {
		// An older preparation of this session is still queued or running (the queue keeps
		// one per session): ask again at a later turn, once it has landed.
		rt.log(`prepare #${nth} at leaf ${leafId} (${decision.why}): an earlier preparation is still pending; asking again later`);
		return;
	}
	const firstTokens = nth === 1 ? tokens : st.cycle.firstTokens;
	st.cycle = { compactionId, asks: nth, firstTokens, lastLeafId: leafId };
	rt.log(`prepare #${nth} requested at leaf ${leafId} (${decision.why}; ${Math.round(pace.tokensPerSecond ?? 0)} tokens/s, latency ${secs(pace.latencyMs)}${pace.latencyMeasured ? "" : " (guess)"}): ${outcome}`);
	requested(rt, st, { requestedAt: at.getTime(), at: performance.now(), leafId, nth, compactionId, jobId: job.id, jobSeq: seq }, outcome === "duplicate");
}
