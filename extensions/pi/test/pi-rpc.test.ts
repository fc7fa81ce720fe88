// The extension inside the real Pi (0.73.1, RPC mode), with a real nats-server, the real
// `compactor plan` for the cut, and a fake OpenAI-compatible model over real HTTP.
//
// Hits: /compact and automatic compaction take the prepared summary (no summary request to
// the model, Pi writes the compaction itself with fromHook true). Fallbacks: every stale or
// missing value, NATS stopped, unreachable or hanging: Pi compacts by itself, no error reaches
// the client, and the hook returns within its deadline. Figures are printed at the end.

import assert from "node:assert/strict";
import { readFileSync, realpathSync } from "node:fs";
import { relative } from "node:path";
import { after, before, describe, test } from "node:test";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { type KV, Kvm } from "@nats-io/kv";
import { has } from "../src/rules.ts";
import { sessionToken } from "../src/session.ts";
import { FakeModel } from "./harness/fakemodel.ts";
import { freePort, type NatsServer, silentListener, startNats } from "./harness/nats.ts";
import { makeWorld, PiRpc, type PiWorld, piVersion, stopAll } from "./harness/pi.ts";
import { compactorBinary, type Plan, plan, valueFromPlan } from "./harness/prepared.ts";

const STORE = "t";
const DEADLINE_MS = 200;
// Pi's threshold is 20000 - 4000 = 16000 tokens: no preparation below 0.5 of it (8000), one
// whatever the pace past 0.85 of it (13600).
const SETTINGS = { contextWindow: 20_000, reserveTokens: 4_000, keepRecentTokens: 1_500 };
const FILES = { "a.txt": "alpha bravo ".repeat(250), "b.txt": "charlie delta ".repeat(260), "c.txt": "echo foxtrot ".repeat(240) };
/** Slack for timer and scheduling latency on a busy 2-core machine, on top of the deadline. */
const SLACK_MS = 150;
/**
 * The server's users: a connection without credentials is "test" (may do anything: the tests
 * and most Pis); "agent" may do anything but hear compactor's events.
 */
const AGENT_PASSWORD = "agent-secret";
const NATS_CONF = `authorization {
  users = [
    { user: "test", password: "test-secret" }
    { user: "agent", password: "${AGENT_PASSWORD}", permissions: { publish: { allow: [">"] }, subscribe: { allow: [">"], deny: ["compactor.events.>"] } } }
  ]
}
no_auth_user: "test"
`;
/** How long the stand-in worker takes over the first preparation of a session (a summary takes a while). */
const WORKER_MS = 3000;
/** A hung step fails its test instead of hanging the suite. */
const TEST_TIMEOUT_MS = 180_000;

interface Entry {
	type: string;
	id: string;
	parentId: string | null;
	[k: string]: unknown;
}

const figures = {
	hitHookMs: [] as number[],
	hitRpcMs: [] as number[],
	autoBlockedMs: [] as number[],
	fallbackHookMs: new Map<string, number>(),
	/** Reads of the bucket while the first preparation was in flight (the worker took WORKER_MS): by event, by poll. */
	inFlightReads: [] as number[],
	polledReads: [] as number[],
};

function entries(file: string): Entry[] {
	return readFileSync(file, "utf8")
		.split("\n")
		.filter((l) => l.trim() !== "")
		.map((l) => JSON.parse(l) as Entry)
		.filter((e) => e.type !== "session");
}

const median = (xs: number[]) => {
	const s = [...xs].sort((a, b) => a - b);
	return s.length ? s[Math.floor((s.length - 1) / 2)] : Number.NaN;
};

describe("the extension in the real Pi (RPC mode)", () => {
	let nats: NatsServer;
	let kv: KV;
	let fm: FakeModel;

	before(async () => {
		[nats] = await Promise.all([startNats({ conf: NATS_CONF }), compactorBinary()]);
		kv = await new Kvm(nats.nc).open("COMPACTOR_PREPARED");
		fm = new FakeModel();
		fm.files = Object.keys(FILES);
		await fm.start();
	});
	after(async () => {
		await stopAll();
		await fm.stop();
		await nats.stop();
		const f = figures;
		console.log(
			`figures: hook on a hit median ${median(f.hitHookMs).toFixed(1)} ms, max ${Math.max(...f.hitHookMs).toFixed(1)} ms over ${f.hitHookMs.length}; ` +
				`RPC compact round trip on a hit median ${median(f.hitRpcMs).toFixed(1)} ms; ` +
				`automatic compaction blocked the agent median ${median(f.autoBlockedMs).toFixed(1)} ms, max ${Math.max(...f.autoBlockedMs).toFixed(1)} ms over ${f.autoBlockedMs.length} (compaction_start to compaction_end); ` +
				`fallback hook times ${[...f.fallbackHookMs].map(([k, v]) => `${k} ${v.toFixed(1)}`).join(", ")} ms; ` +
				`bucket reads while a preparation was in flight for ${WORKER_MS} ms: ${f.inFlightReads.join(", ")} (its result event heard), ${f.polledReads.join(", ")} (events not permitted: read once a second)`,
		);
	});

	/** A Pi bound to a fresh world, with the extension pointed at url. */
	function startPi(url: string, extraEnv: Record<string, string> = {}, args: string[] = []): { pi: PiRpc; world: PiWorld } {
		const world = makeWorld({ baseUrl: fm.baseUrl, ...SETTINGS, files: FILES });
		const pi = new PiRpc(
			world,
			{
				COMPACTOR_NATS_URL: url,
				COMPACTOR_STORES: `${STORE}=${world.sessionDir}`,
				COMPACTOR_PREPARE_DEADLINE_MS: String(DEADLINE_MS),
				COMPACTOR_DEBUG: "1",
				...extraEnv,
			},
			args,
		);
		return { pi, world };
	}

	async function where(pi: PiRpc, world: PiWorld) {
		const st = await pi.state();
		const rel = relative(realpathSync(world.sessionDir), realpathSync(st.sessionFile)).split("\\").join("/");
		return { ...st, rel, key: `${STORE}.${sessionToken(st.sessionId)}` };
	}

	/** prepare writes the value compactor would write for the session as it is on disk now. */
	async function prepare(pi: PiRpc, world: PiWorld, summary: string, edit: (v: Record<string, unknown>, p: Plan) => void = () => {}) {
		const w = await where(pi, world);
		const p = await plan(w.sessionFile, SETTINGS);
		const value = valueFromPlan(p, { store: STORE, path: w.rel, sessionId: w.sessionId, summary, settings: SETTINGS });
		edit(value, p);
		await kv.put(w.key, JSON.stringify(value));
		return { ...w, plan: p, value };
	}

	/** compact runs RPC compact and returns what a client and the file see. */
	async function compact(pi: PiRpc, sessionFile: string, customInstructions?: string) {
		const summariesBefore = fm.summaryRequests;
		const hooksBefore = pi.hookLines().length;
		const from = pi.mark();
		const t0 = performance.now();
		const r = await pi.send(customInstructions ? { type: "compact", customInstructions } : { type: "compact" });
		const rpcMs = performance.now() - t0;
		const end = await pi.waitFor((e) => e.msg.type === "compaction_end", from);
		const start = await pi.waitFor((e) => e.msg.type === "compaction_start", from);
		const errors = pi.events.slice(from).filter((e) => e.msg.type === "extension_error" || (e.msg.type === "compaction_end" && e.msg.errorMessage));
		// stderr (the extension's debug lines) and stdout (events) are separate pipes
		await waitUntil(() => pi.hookLines().length > hooksBefore, "the hook's debug line", 5000);
		const hook = pi.hookLines().slice(hooksBefore);
		assert.equal(hook.length, 1, `one hook call: ${hook.join("\n")}`);
		const hookMs = Number(/ in ([\d.]+) ms$/.exec(hook[0])?.[1]);
		const last = entries(sessionFile).at(-1) as Entry;
		return { r, rpcMs, blockedMs: end.at - start.at, errors, hook: hook[0], hookMs, summaryRequests: fm.summaryRequests - summariesBefore, last };
	}

	/** assertPiCompactedItself: the fallback path, seen from outside. */
	function assertPiCompactedItself(c: Awaited<ReturnType<typeof compact>>, label: string, hookPattern: RegExp) {
		assert.equal(c.r.success, true, `${label}: ${JSON.stringify(c.r)}`);
		assert.ok(c.summaryRequests >= 1, `${label}: Pi asked the model for its own summary`);
		assert.equal(c.last.type, "compaction");
		assert.equal(c.last.fromHook, false, `${label}: Pi's own compaction`);
		assert.match(String(c.last.summary), /Pi's own summary/);
		assert.deepEqual(c.errors, [], `${label}: no error reaches the client`);
		assert.match(c.hook, hookPattern, label);
		assert.ok(c.hookMs <= DEADLINE_MS + SLACK_MS, `${label}: hook took ${c.hookMs} ms`);
		figures.fallbackHookMs.set(label, c.hookMs);
	}

	function assertHit(c: Awaited<ReturnType<typeof compact>>, summary: string, p: Plan) {
		assert.equal(c.r.success, true, JSON.stringify(c.r));
		const data = c.r.data as { summary: string; firstKeptEntryId: string; tokensBefore: number; details: unknown };
		assert.equal(data.summary, summary);
		assert.equal(c.summaryRequests, 0, "no summary request reached the model");
		assert.equal(c.last.type, "compaction");
		assert.equal(c.last.fromHook, true);
		assert.equal(c.last.summary, summary);
		assert.equal(c.last.firstKeptEntryId, p.firstKeptEntryId);
		assert.deepEqual(c.last.details, { readFiles: p.fileOps.readFiles ?? [], modifiedFiles: p.fileOps.modifiedFiles ?? [] });
		assert.equal(c.last.tokensBefore, data.tokensBefore);
		assert.deepEqual(c.errors, []);
		assert.match(c.hook, /: hit /);
		figures.hitHookMs.push(c.hookMs);
		figures.hitRpcMs.push(c.rpcMs);
	}

	test("/compact takes the prepared summary; the next request is summary + kept messages; a value made before that compaction is then stale", { timeout: TEST_TIMEOUT_MS }, async () => {
		const { pi, world } = startPi(nats.url);
		try {
			for (let i = 0; i < 4; i++) await pi.prompt(`task ${i}`);
			const prep = await prepare(pi, world, "PREPARED summary one");
			assert.ok((prep.value.summarizedEntryIds as string[]).length > 0);
			const c = await compact(pi, prep.sessionFile);
			assertHit(c, "PREPARED summary one", prep.plan);
			assert.equal(c.last.parentId, prep.plan.leafId, "Pi appended at its own leaf");

			// What Pi sends next: the summary wrapped as a user message, then exactly the kept messages.
			const before = fm.requests.length;
			await pi.prompt("continue");
			const body = fm.requests[before].body;
			const wrapped = body.messages.findIndex((m) => JSON.stringify(m.content ?? "").includes("PREPARED summary one"));
			assert.equal(body.messages[wrapped].role, "user");
			assert.match(JSON.stringify(body.messages[wrapped].content), /compacted into the following summary/);
			assert.notEqual(body.messages[wrapped + 1].role, "tool", "no orphan tool result after the summary");
			const fileEntries = entries(prep.sessionFile);
			const kept = fileEntries.slice(fileEntries.findIndex((e) => e.id === prep.plan.firstKeptEntryId), fileEntries.findIndex((e) => e.type === "compaction"));
			const keptMessages = kept.filter((e) => e.type === "message");
			assert.equal(body.messages.length, wrapped + 1 + keptMessages.length + 1, "summary, kept messages, new prompt");

			// The old value builds on no compaction; the branch now has one: stale, Pi compacts by itself.
			await pi.prompt("more");
			const old = await kv.get(prep.key);
			assert.ok(old?.json<{ previousCompactionId: null }>().previousCompactionId === null);
			assertPiCompactedItself(await compact(pi, prep.sessionFile), "prepared before the last compaction", /stale \(previous-compaction/);
		} finally {
			await pi.stop();
		}
	});

	/** A stand-in for compactor's worker (see standInWorker). */
	interface StandIn {
		jobs: Array<{ subject: string; msgId: string | undefined; job: Record<string, unknown>; summary: string; plan: Plan }>;
		ignored: Array<Record<string, unknown>>;
		errors: unknown[];
		/** The first job's value is being held (the worker is "working" on it). */
		held: () => boolean;
		/** Lets the first value be written (and its event published). */
		release: () => void;
		/** Reads of the session's prepared value (direct gets on the bucket), with when they came. */
		reads: number[];
		/** When the first value was written. */
		firstPutAt: () => number | undefined;
		/** When the first job was received. */
		firstJobAt: () => number | undefined;
		accept: (yes: boolean) => void;
		stop: () => Promise<void>;
	}

	/**
	 * standInWorker answers the extension's prepare jobs as compactor's worker does: plan the file
	 * at the job's path, write the value, acknowledge the job, publish its result event
	 * (compactor.events.<store>.<token>.<job seq>). The first value is written only when the test
	 * releases it. It stops preparing when told to (accept(false)), before the run that triggers
	 * the compaction, so the value Pi gets is known (a real worker racing Pi's compaction would
	 * find the session compacted).
	 */
	async function standInWorker(pi: PiRpc, world: PiWorld): Promise<StandIn> {
		const jsm = await jetstreamManager(nats.nc);
		const durable = `w${Date.now()}`;
		await jsm.consumers.add("COMPACTOR_JOBS", { durable_name: durable, ack_policy: AckPolicy.Explicit, filter_subject: `compactor.jobs.${STORE}.>` });
		const consumer = await jetstream(nats.nc).consumers.get("COMPACTOR_JOBS", durable);
		const reads: number[] = [];
		const readSub = nats.nc.subscribe(`$JS.API.DIRECT.GET.KV_COMPACTOR_PREPARED.$KV.COMPACTOR_PREPARED.${STORE}.>`, {
			callback: () => {
				reads.push(performance.now());
			},
		});
		let accepting = true;
		let held = false;
		let firstPutAt: number | undefined;
		let firstJobAt: number | undefined;
		let release = () => {};
		const released = new Promise<void>((r) => {
			release = r;
		});
		const w: StandIn = {
			jobs: [], ignored: [], errors: [], reads, held: () => held, release: () => release(), firstPutAt: () => firstPutAt, firstJobAt: () => firstJobAt,
			accept: (yes) => {
				accepting = yes;
			},
			stop: async () => {
				release();
				messages.stop();
				readSub.unsubscribe();
				await working;
				// a work queue takes one consumer per filter: the next test's stand-in needs its place
				await jsm.consumers.delete("COMPACTOR_JOBS", durable);
			},
		};
		const messages = await consumer.consume();
		const working = (async () => {
			for await (const m of messages) {
				const job = m.json<Record<string, unknown>>();
				try {
					if (job.sessionId !== (await pi.state()).sessionId) {
						m.ack(); // a job of an earlier test's session, left in the stream
						continue;
					}
					if (!accepting) {
						m.ack();
						w.ignored.push(job);
						continue;
					}
					firstJobAt ??= performance.now();
					const file = `${world.sessionDir}/${job.path as string}`;
					const p = await plan(file, SETTINGS);
					const summary = `PREPARED automatically #${w.jobs.length + 1}`;
					const value = valueFromPlan(p, {
						store: STORE, path: job.path as string, sessionId: job.sessionId as string, summary, settings: SETTINGS, requestedAt: job.requestedAt as string,
					});
					if (w.jobs.length === 0) {
						held = true;
						await released;
						firstPutAt = performance.now();
					}
					const token = sessionToken(job.sessionId as string);
					await kv.put(`${STORE}.${token}`, JSON.stringify(value));
					// acknowledged for sure before the test looks, so the session's subject is free again
					await m.ackAck();
					w.jobs.push({ subject: m.subject, msgId: m.headers?.get("Nats-Msg-Id"), job, summary, plan: p });
					const event = { v: 1, jobId: job.id, jobSeq: m.seq, store: STORE, sessionId: job.sessionId, path: job.path, kind: "prepare", outcome: "done", durationMs: 1, attempt: 1, at: new Date().toISOString() };
					nats.nc.publish(`compactor.events.${STORE}.${token}.${m.seq}`, JSON.stringify(event));
				} catch (err) {
					w.errors.push(err);
					m.ack();
				}
			}
		})();
		return w;
	}

	test("automatic compaction takes a preparation the extension asked for at turn_end", { timeout: TEST_TIMEOUT_MS }, async () => {
		const { pi, world } = startPi(nats.url);
		const worker = await standInWorker(pi, world);
		const { jobs, ignored } = worker;
		const summariesBefore = fm.summaryRequests;
		try {
			fm.promptTokens = undefined;
			await pi.prompt("small task 1");
			assert.equal(jobs.length, 0, "nothing worth summarizing yet: no request");

			// A second read: past keepRecentTokens by more than 5% of the room, the first
			// preparation of the cycle is asked for at once, long before the threshold.
			await pi.prompt("small task 2");
			// the run is over: no turn follows until the next prompt
			await waitUntil(() => worker.held(), "first prepare job");
			// the worker takes a while, as a summary does (the extension reads nothing meanwhile)
			await new Promise((r) => setTimeout(r, WORKER_MS));
			worker.release();
			await waitUntil(() => /preparation #1 landed: leaf \S+, requested [\d:.]+, ready after [\d.]+ s/.test(pi.stderr), "the extension sees the value land, with no turn after it");
			assert.match(pi.stderr, /preparation #1 landed: .* \(its result event\)/, "learnt from the worker's result event");
			const inFlightReads = worker.reads.filter((t) => t >= (worker.firstJobAt() ?? 0) && t <= (worker.firstPutAt() ?? Infinity)).length;
			figures.inFlightReads.push(inFlightReads);
			assert.equal(inFlightReads, 0, "no read of the bucket while the preparation was in flight");
			await waitUntil(() => jobs.length >= 1, "first prepare job acknowledged");
			const w = await where(pi, world);
			const j = jobs[0];
			assert.equal(j.subject, `compactor.jobs.${STORE}.${sessionToken(w.sessionId)}.prepare`);
			assert.equal(j.msgId, j.job.id);
			assert.deepEqual(Object.keys(j.job), ["v", "kind", "store", "path", "sessionId", "reason", "requestedAt", "expectLeafId", "policy", "counter", "keepRecentTokens", "piVersion", "id"]);
			assert.deepEqual([j.job.v, j.job.kind, j.job.store, j.job.path, j.job.sessionId, j.job.reason], [1, "prepare", STORE, w.rel, w.sessionId, "extension"]);
			assert.deepEqual([j.job.policy, j.job.counter, j.job.keepRecentTokens], ["pi", "estimate", SETTINGS.keepRecentTokens], "planned as Pi plans, at Pi's keepRecentTokens");
			assert.equal(j.job.piVersion, await piVersion(), "the Pi that runs");
			assert.ok(entries(w.sessionFile).some((e) => e.id === j.job.expectLeafId), "expectLeafId is an entry of the session");
			assert.match(pi.stderr, /prepare #1 requested at leaf \S+ \(\d+ tokens to summarize >= \d+/);
			await pi.prompt("one more small step");
			assert.equal(jobs.length, 1, "no top-up while far from the threshold");

			worker.accept(false);
			// Past the threshold, under the window: Pi 1.x compacts right after the first answer's
			// tool result, Pi 0.73 after the run, on its last answer.
			fm.promptTokens = 17_000;
			fm.promptTokensTurns = await turnsPastThreshold();
			const hooksBefore = pi.hookLines().length;
			const from = pi.mark();
			await pi.prompt("the task that fills the window");
			const end = await pi.waitFor((e) => e.msg.type === "compaction_end", from);
			const start = await pi.waitFor((e) => e.msg.type === "compaction_start", from);
			assert.equal(start.msg.reason, "threshold");
			const latest = jobs[jobs.length - 1];
			const result = end.msg.result as { summary: string; firstKeptEntryId: string };
			assert.equal(result.summary, latest.summary);
			assert.equal(result.firstKeptEntryId, latest.plan.firstKeptEntryId);
			assert.equal(fm.summaryRequests, summariesBefore, "no summary request reached the model");
			const last = entries(w.sessionFile).filter((e) => e.type === "compaction").at(-1) as Entry;
			assert.equal(last.fromHook, true);
			assert.equal(last.summary, latest.summary);
			assert.deepEqual(pi.events.slice(from).filter((e) => e.msg.type === "extension_error" || e.msg.errorMessage), []);
			// stderr (the hook's line) and stdout (events) are separate pipes
			await waitUntil(() => pi.hookLines().length > hooksBefore, "the hook's debug line", 5000);
			assert.match(pi.hookLines()[hooksBefore], /: hit .*\[prepared\/none, threshold; value requested [\d:.]+, ready after/);
			figures.autoBlockedMs.push(end.at - start.at);
			// A compaction starts a new cycle: once a span worth it is summarizable again, the
			// extension asks again.
			fm.promptTokens = undefined;
			for (let i = 0; i < 3 && ignored.length === 0; i++) await pi.prompt(`after the compaction ${i}`);
			await waitUntil(() => ignored.length >= 1, "the new cycle's request after the compaction");
			assert.deepEqual(worker.errors, []);
		} finally {
			fm.promptTokens = undefined;
			await worker.stop();
			await pi.stop();
		}
	});

	test("events not permitted: the extension says so once, and learns the landing by reading the bucket", { timeout: TEST_TIMEOUT_MS }, async () => {
		const { pi, world } = startPi(nats.url, { COMPACTOR_NATS_USER: "agent", COMPACTOR_NATS_PASSWORD: AGENT_PASSWORD });
		const worker = await standInWorker(pi, world);
		try {
			fm.promptTokens = undefined;
			await pi.prompt("small task 1");
			await pi.prompt("small task 2");
			await waitUntil(() => worker.held(), "first prepare job");
			await new Promise((r) => setTimeout(r, WORKER_MS));
			worker.release();
			await waitUntil(() => /preparation #1 landed: leaf \S+, requested [\d:.]+, ready after [\d.]+ s, [\d.]+ s ago\n/.test(pi.stderr), "the extension sees the value land, by reading the bucket");
			assert.doesNotMatch(pi.stderr, /its result event/);
			assert.equal(pi.stderr.match(/events not permitted/g)?.length, 1, `said once: ${pi.stderr}`);
			assert.match(pi.stderr, /events not permitted \(not permitted: compactor\.events\.t\.\S+ \(subscribe refused/);
			const polled = worker.reads.filter((t) => t >= (worker.firstJobAt() ?? 0) && t <= (worker.firstPutAt() ?? Infinity)).length;
			figures.polledReads.push(polled);
			assert.ok(polled >= 1, `the bucket was read while the preparation was in flight (${polled})`);
			assert.deepEqual(worker.errors, []);
		} finally {
			await worker.stop();
			await pi.stop();
		}
	});

	test("no valid preparation: an automatic compaction takes the extract, /compact is Pi's own", { timeout: TEST_TIMEOUT_MS }, async () => {
		const { pi, world } = startPi(nats.url);
		// A stand-in for the workers' bridge: answers extract requests with the value for Pi's
		// own cut (planned by compactor as Pi plans), and records what it was asked.
		const asked: Array<Record<string, unknown>> = [];
		const sub = nats.nc.subscribe(`compactor.bridge.${STORE}.*`, {
			callback: (_err, msg) => {
				void (async () => {
					const req = msg.json<Record<string, unknown>>();
					asked.push(req);
					if (req.extract !== true) return msg.respond(JSON.stringify({ v: 1, error: "nothing prepared", stale: true }));
					const p = await plan(`${world.sessionDir}/${req.path as string}`, { ...SETTINGS, keepRecentTokens: req.keepRecentTokens as number }, "pi");
					if (p.firstKeptEntryId !== req.firstKeptEntryId) return msg.respond(JSON.stringify({ v: 1, error: `cut ${p.firstKeptEntryId}, asked ${String(req.firstKeptEntryId)}` }));
					const value = valueFromPlan(p, { store: STORE, path: req.path as string, sessionId: req.sessionId as string, summary: "EXTRACT at Pi's cut", settings: SETTINGS });
					// as compactor says how it made the value: on the session's base, its span extracted
					Object.assign(value, { builtOn: { source: "model", baseMadeAt: "2026-12-06T07:27:55.100Z" }, spanTokens: { model: 0, extract: 777 } });
					msg.respond(JSON.stringify({ v: 1, prepared: value }));
				})();
			},
		});
		// The hook reports the extension publishes (compactor counts them).
		const reports: Array<Record<string, unknown>> = [];
		const hooks = nats.nc.subscribe(`compactor.hooks.${STORE}.*`, { callback: (_err, msg) => void reports.push(msg.json<Record<string, unknown>>()) });
		try {
			for (let i = 0; i < 3; i++) await pi.prompt(`task ${i}`);
			const w = await where(pi, world);
			await kv.delete(w.key);
			// /compact with nothing prepared: Pi's own summary, no extract asked for
			const own = await compact(pi, w.sessionFile);
			assertPiCompactedItself(own, "manual, nothing prepared", /miss \(nothing prepared\) \[pi\/(not-prepared|not-ready), manual/);
			assert.equal(asked.filter((r) => r.extract).length, 0, "no extract for /compact");
			// Pi's own summary is a model's over all of Pi's span
			assert.match(own.hook, /; span (\d+) tokens: \1 model, 0 extract\]/);
			await waitUntil(() => reports.length >= 1, "the hook report of /compact", 5000);
			const ownReport = reports.at(-1) as { result?: string; spanTokens?: { model: number; extract: number }; base?: string };
			assert.equal(ownReport.result, "pi");
			assert.ok((ownReport.spanTokens?.model ?? 0) > 0 && ownReport.spanTokens?.extract === 0 && ownReport.base === undefined, JSON.stringify(ownReport));
			// An automatic compaction with nothing prepared: the extract
			for (let i = 0; i < 3; i++) await pi.prompt(`more ${i}`);
			await kv.delete(w.key);
			const summaries = fm.summaryRequests;
			const hooks = pi.hookLines().length;
			fm.promptTokens = 17_000;
			fm.promptTokensTurns = await turnsPastThreshold();
			const from = pi.mark();
			await pi.prompt("the task that fills the window");
			const end = await pi.waitFor((e) => e.msg.type === "compaction_end", from);
			assert.equal((end.msg.result as { summary: string }).summary, "EXTRACT at Pi's cut");
			assert.equal(fm.summaryRequests, summaries, "no summary request reached the model");
			await waitUntil(() => pi.hookLines().length > hooks, "the hook's debug line", 5000);
			assert.match(pi.hookLines()[hooks], /extract used .*\[extract\/(not-prepared|not-ready), threshold.*; base model \(made 07:27:55\.100\); span 777 tokens: 0 model, 777 extract\]/);
			await waitUntil(() => reports.some((r) => r.result === "extract"), "the hook report of the extract", 5000);
			const report = reports.find((r) => r.result === "extract") as Record<string, unknown>;
			assert.deepEqual([report.spanTokens, report.base, report.baseRefused], [{ model: 0, extract: 777 }, "model", undefined]);
			const req = asked.filter((r) => r.extract).at(-1);
			assert.ok(req);
			assert.deepEqual([req.piVersion, req.keepRecentTokens, req.reserveTokens, req.contextWindow], [await piVersion(), SETTINGS.keepRecentTokens, SETTINGS.reserveTokens, SETTINGS.contextWindow]);
			const last = entries(w.sessionFile).filter((e) => e.type === "compaction").at(-1) as Entry;
			assert.deepEqual([last.summary, last.fromHook], ["EXTRACT at Pi's cut", true]);
		} finally {
			fm.promptTokens = undefined;
			sub.unsubscribe();
			hooks.unsubscribe();
			await pi.stop();
		}
	});

	test("stale or missing values: Pi compacts by itself, within the deadline, no error", { timeout: TEST_TIMEOUT_MS }, async () => {
		const { pi, world } = startPi(nats.url);
		try {
			const rounds: Array<{ label: string; instr?: string; edit?: (v: Record<string, unknown>, p: Plan) => void; none?: boolean; hook: RegExp }> = [
				{ label: "nothing prepared", none: true, hook: /miss \(nothing prepared\)/ },
				{ label: "leaf not on the branch", edit: (v) => void (v.leafId = "0f0f0f0f"), hook: /stale \(leaf-off-branch/ },
				{ label: "summarized entries differ", edit: (v) => void (v.summarizedEntryIds = (v.summarizedEntryIds as string[]).slice(1)), hook: /stale \(entries-differ/ },
				{ label: "other instructions", instr: "Focus on b.txt", hook: /stale \(instructions/ },
				{ label: "does not fit", edit: (v) => void (v.summary = "x".repeat(70_000)), hook: /stale \(too-big/ },
				{ label: "another previous compaction", edit: (v) => void (v.previousCompactionId = "0e0e0e0e"), hook: /stale \(previous-compaction/ },
				{ label: "malformed details", edit: (v) => void (v.details = { details: v.details }), hook: /stale \(malformed/ },
			];
			for (const round of rounds) {
				for (let i = 0; i < 3; i++) await pi.prompt(`${round.label} ${i}`);
				const w = await where(pi, world);
				if (round.none) await kv.delete(w.key);
				else await prepare(pi, world, `PREPARED for ${round.label}`, round.edit);
				assertPiCompactedItself(await compact(pi, w.sessionFile, round.instr), round.label, round.hook);
			}
			// Control in the same session: the same instructions on both sides make it a hit.
			for (let i = 0; i < 3; i++) await pi.prompt(`focused ${i}`);
			const prep = await prepare(pi, world, "PREPARED with focus", (v) => void (v.customInstructions = "Focus on b.txt"));
			assertHit(await compact(pi, prep.sessionFile, "Focus on b.txt"), "PREPARED with focus", prep.plan);
		} finally {
			await pi.stop();
		}
	});

	test("NATS stopped under a connected Pi: the next compaction is Pi's own, within the deadline", { timeout: TEST_TIMEOUT_MS }, async () => {
		const own = await startNats();
		const { pi, world } = startPi(own.url);
		try {
			for (let i = 0; i < 3; i++) await pi.prompt(`task ${i}`);
			const w = await where(pi, world);
			const p = await plan(w.sessionFile, SETTINGS);
			const ownKv = await new Kvm(own.nc).open("COMPACTOR_PREPARED");
			await ownKv.put(w.key, JSON.stringify(valueFromPlan(p, { store: STORE, path: w.rel, sessionId: w.sessionId, summary: "PREPARED before the outage", settings: SETTINGS })));
			assertHit(await compact(pi, w.sessionFile), "PREPARED before the outage", p);
			await own.stop();
			fm.promptTokens = 12_000; // turn_end now tries to publish prepare jobs into the void
			for (let i = 0; i < 3; i++) await pi.prompt(`during the outage ${i}`);
			fm.promptTokens = undefined;
			assertPiCompactedItself(await compact(pi, w.sessionFile), "NATS stopped", /miss \((timeout|.*)\)/);
		} finally {
			fm.promptTokens = undefined;
			await pi.stop();
			await own.stop();
		}
	});

	test("unreachable or hanging NATS: Pi compacts by itself, within the deadline", { timeout: TEST_TIMEOUT_MS }, async () => {
		const silent = await silentListener();
		const cases = [
			{ label: "refused port", url: `nats://127.0.0.1:${await freePort()}` },
			{ label: "hanging server", url: silent.url },
		];
		try {
			for (const c of cases) {
				const { pi, world } = startPi(c.url);
				try {
					fm.promptTokens = 12_000; // a prepare request is attempted too
					for (let i = 0; i < 3; i++) await pi.prompt(`task ${i}`);
					fm.promptTokens = undefined;
					const w = await where(pi, world);
					assertPiCompactedItself(await compact(pi, w.sessionFile), c.label, /miss \(/);
					await waitUntil(() => pi.stderr.includes("prepare request failed"), `${c.label}: the failed request logged at debug level`, 5000);
				} finally {
					fm.promptTokens = undefined;
					await pi.stop();
				}
			}
		} finally {
			await silent.close();
		}
	});

	test("switched off (--compactor-off): a valid prepared value is ignored", { timeout: TEST_TIMEOUT_MS }, async () => {
		const { pi, world } = startPi(nats.url, {}, ["--compactor-off"]);
		try {
			for (let i = 0; i < 3; i++) await pi.prompt(`task ${i}`);
			const prep = await prepare(pi, world, "PREPARED but unused");
			const before = fm.summaryRequests;
			const r = await pi.send({ type: "compact" });
			assert.equal(r.success, true);
			assert.ok(fm.summaryRequests > before);
			assert.equal(entries(prep.sessionFile).at(-1)?.fromHook, false);
			assert.match(pi.stderr, /Z disabled$/m);
		} finally {
			await pi.stop();
		}
	});

	test("ten automatic compactions in a row from prepared values (time the agent is blocked)", { timeout: TEST_TIMEOUT_MS }, async () => {
		const { pi, world } = startPi(nats.url);
		const summariesBefore = fm.summaryRequests;
		try {
			for (let round = 0; round < 10; round++) {
				fm.promptTokens = undefined;
				// two reads: Pi 1.x plans nothing while what it would summarize is empty
				await pi.prompt(`round ${round} task`);
				await pi.prompt(`round ${round} second task`);
				const prep = await prepare(pi, world, `PREPARED round ${round}`);
				if (round > 0) assert.ok(prep.plan.previousCompactionId, "builds on the previous (hook-made) compaction");
				const hooksBefore = pi.hookLines().length;
				// the run is past the threshold: Pi compacts by itself, automatically (Pi 1.x right
				// after the first answer's tool result, Pi 0.73 after the run)
				fm.promptTokens = 17_000;
				fm.promptTokensTurns = await turnsPastThreshold();
				const from = pi.mark();
				await pi.prompt(`round ${round} big task`);
				const start = await pi.waitFor((e) => e.msg.type === "compaction_start", from);
				const end = await pi.waitFor((e) => e.msg.type === "compaction_end", from);
				assert.equal(start.msg.reason, "threshold");
				assert.equal((end.msg.result as { summary: string }).summary, `PREPARED round ${round}`);
				await waitUntil(() => pi.hookLines().length > hooksBefore, "the hook's debug line", 5000);
				const hook = pi.hookLines()[hooksBefore];
				assert.match(hook, /: hit /);
				figures.hitHookMs.push(Number(/ in ([\d.]+) ms$/.exec(hook)?.[1]));
				figures.autoBlockedMs.push(end.at - start.at);
				// (from 0.84.4 Pi compacts mid-run: the run's answer follows the compaction)
				const last = entries(prep.sessionFile).filter((e) => e.type === "compaction").at(-1) as Entry;
				assert.equal(last.summary, `PREPARED round ${round}`);
				assert.equal(last.fromHook, true);
			}
			assert.equal(fm.summaryRequests, summariesBefore, "no summary request reached the model");
			assert.ok(figures.autoBlockedMs.length >= 10);
		} finally {
			fm.promptTokens = undefined;
			await pi.stop();
		}
	});
});

/**
 * turnsPastThreshold is how many answers of a run must report a context past the threshold
 * for Pi to compact once: from 0.84.4 Pi checks after the first answer's tool results
 * (mid-run), before only the run's last answer.
 */
async function turnsPastThreshold(): Promise<number> {
	return has(await piVersion(), "MidRunCompaction") ? 1 : 2;
}

async function waitUntil(cond: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
	const until = performance.now() + timeoutMs;
	while (!cond()) {
		if (performance.now() > until) throw new Error(`timed out waiting for ${what}`);
		await new Promise((r) => setTimeout(r, 20));
	}
}
