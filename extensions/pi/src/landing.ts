// How the extension learns that the preparation it asked for has landed (its value is in the
// bucket), so that the next one is not held back and the pace learns how long one takes.
//
// By the worker's result event: before its first request the session subscribes to its own
// events (compactor.events.<store>.<session token>.*, which `compactor auth` lets a store's
// agent hear), as `compactor enqueue --wait` does; the event that names the request's job id
// and sequence says it was made and stored (done), or that it ended without a value (skipped,
// failed). No read of the bucket is needed for that.
//
// Where the server refuses the subscription (an agent without that permission), it says so
// once in the debug line and reads the bucket instead, at most once a second, until the value
// shows up or the request is given up. A request that may have ended before the subscription
// heard of it (a duplicate of an earlier one) is looked for the same way.

import type { Msg } from "@nats-io/transport-node";
import { type CompactorClient, withDeadline } from "./client.ts";
import { clock, errText, secs } from "./debug.ts";
import { eventSubject, preparedKey, type ResultEvent, type SessionLocation, sessionToken } from "./session.ts";
import type { Runtime, SessionState } from "./state.ts";
import { type InFlight, lostAfterMs } from "./trigger.ts";

/** How often at most the extension reads the bucket for a preparation in flight. */
const POLL_EVERY_MS = 1000;
/** The shortest wait before a poll put off runs (one still running ends within POLL_EVERY_MS). */
const POLL_RETRY_MIN_MS = 50;
/** Final events kept that named no request in flight yet (one may come before its job's ack is read). */
const RECENT_EVENTS = 8;

/** isRefusal: the server refused the subscription (anything else is a failure to try again). */
function isRefusal(err: unknown): boolean {
	return errText(err).startsWith("not permitted: ");
}

/**
 * followEvents subscribes the session to its events, once, before its first request. A
 * refusal switches the session to the poll (said once); another failure throws (the request
 * would fail too) and the next request tries again.
 */
export async function followEvents(rt: Runtime, cl: CompactorClient, st: SessionState, loc: SessionLocation): Promise<void> {
	if (st.landing) return;
	try {
		const recent = new Map<number, ResultEvent>();
		const sub = await cl.listen(`${eventSubject(loc)}.*`, (m) => heard(rt, st, loc, m), (err) => refused(rt, st, err));
		if (rt.state !== st || st.landing) return sub.stop();
		st.landing = { by: "events", sub, recent };
	} catch (err) {
		if (!isRefusal(err)) throw err;
		refused(rt, st, err);
	}
}

/** refused: events are not permitted; landings are learnt from the bucket from now on. */
function refused(rt: Runtime, st: SessionState, err: unknown): void {
	if (st.landing?.by === "events") st.landing.sub.stop();
	st.landing = { by: "poll" };
	rt.log(`events not permitted (${errText(err)}): a preparation's landing is read from the bucket, once a second`);
	if (st.inFlight) {
		st.inFlight.heardBy = "poll";
		pollLater(rt, st, performance.now());
	}
}

/**
 * requested: a request is in flight; follow it until it lands. Its event may have come
 * already (a fast worker), and a duplicate's job may have ended before the subscription.
 */
export function requested(rt: Runtime, st: SessionState, f: InFlight, duplicate: boolean): void {
	const landing = st.landing;
	st.inFlight = f;
	f.heardBy = landing?.by === "events" && !duplicate ? "event" : "poll";
	const ev = landing?.by === "events" && f.jobSeq !== undefined ? landing.recent.get(f.jobSeq) : undefined;
	if (ev && ev.jobId === f.jobId) return ended(rt, st, f, ev);
	// look until it lands, whether or not the agent takes another turn
	if (f.heardBy === "poll") pollLater(rt, st, performance.now());
}

/** heard is one message on the session's events: the end of the request in flight, or not. */
function heard(rt: Runtime, st: SessionState, loc: SessionLocation, m: Msg): void {
	// a stream's delivery to a consumer, not a worker's publish
	if (m.reply?.startsWith("$JS.ACK.")) return;
	let data: unknown;
	try {
		data = m.json();
	} catch {
		return;
	}
	const ev = finalEvent(data, loc);
	if (!ev || rt.state !== st || st.landing?.by !== "events") return;
	const f = st.inFlight;
	if (f && f.jobSeq === ev.jobSeq && f.jobId === ev.jobId) return ended(rt, st, f, ev);
	st.landing.recent.set(ev.jobSeq, ev);
	if (st.landing.recent.size > RECENT_EVENTS) st.landing.recent.delete(st.landing.recent.keys().next().value as number);
}

/**
 * finalEvent is data (a parsed event) when it ends a job of this session: it must name the
 * store and session its subject names (its fields are what a worker of the store wrote).
 */
export function finalEvent(data: unknown, loc: SessionLocation): ResultEvent | undefined {
	const ev = data as Partial<ResultEvent> | null;
	if (typeof ev !== "object" || ev === null || typeof ev.jobId !== "string" || typeof ev.jobSeq !== "number" || typeof ev.outcome !== "string") return undefined;
	if (ev.outcome === "retry" || ev.store !== loc.store || typeof ev.sessionId !== "string" || sessionToken(ev.sessionId) !== loc.token) return undefined;
	return ev as ResultEvent;
}

/** ended: the request's job ended; done means its value is stored. */
function ended(rt: Runtime, st: SessionState, f: InFlight, ev: ResultEvent): void {
	st.inFlight = undefined;
	if (ev.outcome !== "done") {
		rt.log(`preparation #${f.nth} ${ev.outcome} by the worker (${ev.reason ?? ev.error ?? "no reason given"}): no value; not in flight any more`);
		return;
	}
	const made = Number.isNaN(Date.parse(ev.at)) ? Date.now() : Date.parse(ev.at);
	const took = made - f.requestedAt;
	st.pace.preparationTook(took);
	rt.log(`preparation #${f.nth} landed: leaf ${f.leafId}, requested ${clock(f.requestedAt)}, ready after ${secs(took)}, ${secs(Date.now() - made)} ago (its result event)`);
}

/**
 * pollInFlight looks (at most once a second, in the background) whether the value asked for
 * has landed, and keeps looking once a second until it has or the request is given up
 * (lostAfterMs). A look it may not take now (too soon after the last, or the last still
 * running) is put off rather than dropped. So a value that lands after the run's last turn
 * is seen when it lands, not at the next run's turns, and the next preparation is not held
 * back by a request that has in fact landed.
 */
export function pollInFlight(rt: Runtime, cl: CompactorClient, st: SessionState, now: number): void {
	if (!st.inFlight || !st.location || st.inFlight.heardBy === "event") return;
	if (st.polling || now - st.lastPollAt < POLL_EVERY_MS) return pollLater(rt, st, now);
	st.polling = true;
	st.lastPollAt = now;
	const loc = st.location;
	void withDeadline(cl.getPrepared(preparedKey(loc)), POLL_EVERY_MS)
		.then((got) => {
			if (got.ok && got.value !== undefined) noteValue(rt, st, got.value);
		})
		.finally(() => {
			st.polling = false;
			// not landed yet (or the read failed): look again in a second, until it lands or
			// is given up, whether or not the agent takes another turn
			if (st.inFlight) pollLater(rt, st, performance.now());
		});
}

/** pollLater makes pollInFlight's next look, once (a single timer), when it may. */
function pollLater(rt: Runtime, st: SessionState, now: number): void {
	if (st.pollTimer) return;
	const wait = Math.max(POLL_RETRY_MIN_MS, st.lastPollAt + POLL_EVERY_MS - now);
	st.pollTimer = setTimeout(() => {
		st.pollTimer = undefined;
		const cl = rt.client;
		const f = st.inFlight;
		// the session moved on, the extension closed, or the request landed meanwhile
		if (rt.state !== st || !cl || !f) return;
		const at = performance.now();
		if (at - f.at > lostAfterMs(st.pace.estimate())) return; // the next turn_end gives it up
		pollInFlight(rt, cl, st, at);
	}, wait);
	// a put-off poll never keeps Pi's process alive
	st.pollTimer.unref?.();
}

/** noteValue learns from a value read from the bucket: when the request in flight landed, and how long it took. */
export function noteValue(rt: Runtime, st: SessionState, value: unknown): string {
	const v = value as { requestedAt?: unknown; createdAt?: unknown; leafId?: unknown };
	if (typeof v?.requestedAt !== "string" || typeof v.createdAt !== "string") return "";
	const asked = Date.parse(v.requestedAt);
	const made = Date.parse(v.createdAt);
	const took = made - asked;
	const timing = `requested ${clock(asked)}, ready after ${secs(took)}, ${secs(Date.now() - made)} ago`;
	const f = st.inFlight;
	if (f && asked === f.requestedAt) {
		st.pace.preparationTook(took);
		st.inFlight = undefined;
		rt.log(`preparation #${f.nth} landed: leaf ${String(v.leafId)}, ${timing}`);
	}
	return timing;
}
