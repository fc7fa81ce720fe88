// Configuration, naming (session token, store and path, job) and the prepare trigger.

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { PermissionViolationError } from "@nats-io/transport-node";
import { notPermitted, withDeadline } from "../src/client.ts";
import { agentInboxPrefix, describeNats, loadConfig, parseStores, readPiCompactionSettings } from "../src/config.ts";
import { preparableTokens } from "../src/context.ts";
import type { ProjectedEntry } from "../src/validate.ts";
import { locateSession, prepareJob, prepareSubject, preparedKey, sessionToken, valueMaking } from "../src/session.ts";
import { type Cycle, type InFlight, lostAfterMs, Pace, type PaceEstimate, type Snapshot, shouldAsk } from "../src/trigger.ts";

const here = dirname(fileURLToPath(import.meta.url));

describe("config", () => {
	test("stores parse as the Go CLI parses them", () => {
		const bare = parseStores("team=/srv/a, solo=/srv/b;/srv/c");
		assert.deepEqual(bare.stores, [
			{ name: "team", dir: "/srv/a" },
			{ name: "solo", dir: "/srv/b" },
		]);
		assert.deepEqual(bare.errors, ['store "/srv/c": want NAME=DIR (for example default=/srv/c)'], "a bare directory is refused");
		const { stores, errors } = parseStores("ok=/x,bad.name=/y,empty=,=/z");
		assert.deepEqual(stores, [{ name: "ok", dir: "/x" }]);
		assert.equal(errors.length, 3);
		assert.deepEqual(parseStores("a=/p=q").stores, [{ name: "a", dir: "/p=q" }], "only the first '=' separates");
	});

	test("environment, fallbacks and flags", () => {
		const c = loadConfig({}, "/home/u/.pi/agent");
		assert.equal(c.enabled, true);
		assert.deepEqual(c.stores, [{ name: "default", dir: "/home/u/.pi/agent/sessions" }]);
		assert.equal(c.nats.url, "nats://127.0.0.1:4222");
		assert.equal(c.prepareFraction, 0.05);
		assert.equal(c.prepareStep, 0.25);
		assert.equal(c.prepareLatencyMs, 30_000);
		assert.equal(c.deadlineMs, 200);
		assert.deepEqual([c.extract, c.extractDeadlineMs], [true, 1500]);
		assert.equal(c.debug, false);

		const env = {
			NATS_URL: "nats://fallback:4222",
			COMPACTOR_NATS_TOKEN: "s3cret",
			NATS_CREDS: "/etc/nats.creds",
			COMPACTOR_PREPARE_FRACTION: "0.6",
			COMPACTOR_PREPARE_LATENCY_MS: "8000",
			COMPACTOR_PREPARE_DEADLINE_MS: "150",
			COMPACTOR_STORES: "team=/srv/s",
			COMPACTOR_DEBUG: "1",
			COMPACTOR_EXTRACT: "off",
			COMPACTOR_EXTRACT_DEADLINE_MS: "400",
		};
		const d = loadConfig(env, "/a");
		assert.equal(d.nats.url, "nats://fallback:4222");
		assert.equal(d.nats.token, "s3cret");
		assert.equal(d.nats.credsFile, "/etc/nats.creds");
		assert.equal(d.prepareFraction, 0.6);
		assert.equal(d.prepareLatencyMs, 8000);
		assert.equal(d.deadlineMs, 150);
		assert.deepEqual([d.extract, d.extractDeadlineMs], [false, 400]);
		assert.deepEqual(d.stores, [{ name: "team", dir: "/srv/s" }]);
		assert.equal(d.debug, true);
		assert.equal(loadConfig({ ...env, COMPACTOR_NATS_URL: "nats://main:4222" }, "/a").nats.url, "nats://main:4222");

		const f = loadConfig(env, "/a", { fraction: "0.9", deadlineMs: "50", off: true });
		assert.equal(f.prepareFraction, 0.9);
		assert.equal(f.deadlineMs, 50);
		assert.equal(f.enabled, false);
		assert.equal(loadConfig({ COMPACTOR_EXTENSION: "off" }, "/a").enabled, false);

		const bad = loadConfig({ COMPACTOR_PREPARE_FRACTION: "2", COMPACTOR_PREPARE_DEADLINE_MS: "soon", COMPACTOR_PREPARE_LATENCY_MS: "-1" }, "/a");
		assert.equal(bad.prepareFraction, 0.05);
		assert.equal(bad.deadlineMs, 200);
		assert.equal(bad.prepareLatencyMs, 30_000);
		assert.equal(bad.problems.length, 3);
	});

	test("the environment means what it means to the Go CLI (testdata/env-parity.json, also read by its TestEnvParity)", () => {
		const table = JSON.parse(readFileSync(join(here, "testdata", "env-parity.json"), "utf8")) as {
			cases: Array<{ name: string; env: Record<string, string>; agentDir: string; nats: Record<string, string>; stores: Array<{ name: string; dir: string }>; refused?: string[] }>;
		};
		assert.ok(table.cases.length >= 5);
		for (const c of table.cases) {
			const cfg = loadConfig(c.env, c.agentDir);
			const nats = Object.fromEntries(Object.entries(cfg.nats).filter(([, v]) => v !== undefined && v !== ""));
			assert.deepEqual(nats, c.nats, c.name);
			assert.deepEqual(cfg.stores, c.stores, c.name);
			for (const part of c.refused ?? []) {
				assert.ok(cfg.problems.some((p) => p.includes(`"${part}": want NAME=DIR`)), `${c.name}: ${cfg.problems.join("; ")}`);
			}
		}
	});

	test("the agent's inbox is the one compactor auth permits it: _INBOX_agent_<first store>", () => {
		assert.equal(agentInboxPrefix([{ name: "zeta", dir: "/z" }, { name: "alpha", dir: "/a" }]), "_INBOX_agent_alpha");
		assert.equal(agentInboxPrefix([]), "_INBOX_agent");
		assert.equal(loadConfig({ COMPACTOR_NATS_INBOX_PREFIX: "_INBOX_agent_zeta", COMPACTOR_NATS_URL: "nats://x:1" }, "/a").nats.inboxPrefix, "_INBOX_agent_zeta");
	});

	test("a local service's address and generated token are found in its data directory, as the Go clients find them", () => {
		const data = mkdtempSync(join(tmpdir(), "compactor-data-"));
		try {
			assert.equal(loadConfig({ COMPACTOR_DATA_DIR: data }, "/a").nats.tokenFile, undefined, "no token file: none used");
			writeFileSync(join(data, "service.json"), JSON.stringify({ pid: 1, clientUrl: "tls://127.0.0.1:4999", auth: "token", tlsCert: "/etc/c.pem" }));
			writeFileSync(join(data, "nats.token"), "t0ken\n", { mode: 0o600 });
			const local = loadConfig({ COMPACTOR_DATA_DIR: data }, "/a").nats;
			assert.equal(local.url, "tls://127.0.0.1:4999");
			assert.equal(local.tlsCaFile, "/etc/c.pem");
			assert.equal(local.tokenFile, join(data, "nats.token"));
			const given = loadConfig({ COMPACTOR_DATA_DIR: data, COMPACTOR_NATS_NKEY: "/k.nk" }, "/a").nats;
			assert.equal(given.tokenFile, undefined, "credentials given: the local token is not added");
			const remote = loadConfig({ COMPACTOR_DATA_DIR: data, COMPACTOR_NATS_URL: "nats://far:4222" }, "/a").nats;
			assert.equal(remote.url, "nats://far:4222");
			assert.equal(remote.tokenFile, undefined, "another server: the local token is not sent to it");
		} finally {
			rmSync(data, { recursive: true, force: true });
		}
	});

	test("a refusal by the server reads 'not permitted: SUBJECT', an other error nothing", () => {
		const pe = PermissionViolationError.parse('Permissions Violation for Publish to "compactor.jobs.hostB.s1.prepare"');
		assert.ok(pe);
		assert.equal(
			notPermitted(new Error("wrapped", { cause: pe }), ["hostA"]),
			"not permitted: compactor.jobs.hostB.s1.prepare (publish refused for role agent of store hostA; see compactor's docs/security.md)",
		);
		assert.equal(notPermitted(new Error("timeout"), ["hostA"]), undefined);
	});

	test("describeNats never shows a secret", () => {
		const s = describeNats({ url: "nats://alice:pw-secret@host:4222", token: "tok-secret", password: "pw-secret" });
		assert.ok(!s.includes("secret") && !s.includes("alice"), s);
		assert.match(s, /auth=token/);
		assert.match(s, /host:4222/);
	});

	test("Pi's compaction settings: global overlaid by project, Pi's defaults otherwise", () => {
		const root = mkdtempSync(join(tmpdir(), "compactor-pi-ext-settings-"));
		try {
			const agent = join(root, "agent");
			const cwd = join(root, "proj");
			mkdirSync(agent);
			mkdirSync(join(cwd, ".pi"), { recursive: true });
			assert.deepEqual(readPiCompactionSettings(cwd, agent), { enabled: true, reserveTokens: 16384, keepRecentTokens: 20000 });
			writeFileSync(join(agent, "settings.json"), JSON.stringify({ compaction: { reserveTokens: 9000, keepRecentTokens: 5000 } }));
			writeFileSync(join(cwd, ".pi", "settings.json"), JSON.stringify({ compaction: { reserveTokens: 12000 } }));
			assert.deepEqual(readPiCompactionSettings(cwd, agent), { enabled: true, reserveTokens: 12000, keepRecentTokens: 5000 });
			writeFileSync(join(cwd, ".pi", "settings.json"), "{not json");
			assert.equal(readPiCompactionSettings(cwd, agent).reserveTokens, 9000);
		} finally {
			rmSync(root, { recursive: true, force: true });
		}
	});
});

describe("naming", () => {
	test("session tokens equal compactor's Go SessionToken", () => {
		const golden = JSON.parse(readFileSync(join(here, "testdata", "session-tokens.json"), "utf8")) as { vectors: Array<{ id: string; token: string }> };
		assert.ok(golden.vectors.length >= 10);
		for (const { id, token } of golden.vectors) assert.equal(sessionToken(id), token, JSON.stringify(id));
	});

	test("store and relative path through symlinks, first matching store wins", async () => {
		const root = mkdtempSync(join(tmpdir(), "compactor-pi-ext-loc-"));
		try {
			const real = join(root, "real", "sessions");
			mkdirSync(join(real, "--proj--"), { recursive: true });
			const file = join(real, "--proj--", "2026_abc.jsonl");
			writeFileSync(file, "{}\n");
			symlinkSync(join(root, "real"), join(root, "link"));
			const viaLink = join(root, "link", "sessions", "--proj--", "2026_abc.jsonl");
			const stores = [
				{ name: "other", dir: join(root, "nowhere") },
				{ name: "team", dir: join(root, "link", "sessions") },
				{ name: "late", dir: real },
			];
			const loc = await locateSession(viaLink, "sess.1", stores);
			assert.deepEqual(loc, { store: "team", path: "--proj--/2026_abc.jsonl", sessionId: "sess.1", token: sessionToken("sess.1") });
			assert.equal(preparedKey(loc), `team.${sessionToken("sess.1")}`);
			assert.equal(await locateSession(join(real, "--proj--", "missing.jsonl"), "x", stores), undefined, "not written yet");
			assert.equal(await locateSession(file, "x", [{ name: "o", dir: join(root, "real", "sessions", "--proj--", "sub") }]), undefined);
		} finally {
			rmSync(root, { recursive: true, force: true });
		}
	});

	test("prepare job: contract fields, subject, and an id that follows the request", () => {
		const loc = { store: "team", path: "--p--/s.jsonl", sessionId: "0199-abc", token: "0199-abc" };
		const now = new Date("2026-03-04T05:06:07.000Z");
		const job = prepareJob(loc, "leaf0001", undefined, 20000, now);
		assert.deepEqual(Object.keys(job), ["v", "kind", "store", "path", "sessionId", "reason", "requestedAt", "expectLeafId", "policy", "counter", "keepRecentTokens", "id"]);
		assert.deepEqual([job.policy, job.counter, job.keepRecentTokens], ["pi", "estimate", 20000], "planned as Pi plans");
		assert.equal(job.v, 1);
		assert.equal(job.kind, "prepare");
		assert.equal(job.reason, "extension");
		assert.equal(job.requestedAt, "2026-03-04T05:06:07.000Z");
		assert.equal(job.expectLeafId, "leaf0001");
		assert.match(job.id, /^prepare:team:0199-abc:leaf0001:[0-9a-f]{16}$/);
		assert.equal(prepareSubject(loc), "compactor.jobs.team.0199-abc.prepare");
		assert.equal(prepareJob(loc, "leaf0001", undefined, 20000, new Date()).id, job.id, "same request, same id");
		assert.notEqual(prepareJob(loc, "leaf0002", undefined, 20000, now).id, job.id);
		assert.notEqual(prepareJob(loc, "leaf0001", undefined, 8000, now).id, job.id, "another keepRecentTokens, another request");
		const focused = prepareJob(loc, "leaf0001", " Focus ", 20000, now);
		assert.equal(focused.instructions, "Focus");
		assert.notEqual(focused.id, job.id);
		const v16 = prepareJob(loc, "leaf0001", undefined, 20000, now, "1.6.0");
		assert.deepEqual(Object.keys(v16), ["v", "kind", "store", "path", "sessionId", "reason", "requestedAt", "expectLeafId", "policy", "counter", "keepRecentTokens", "piVersion", "id"]);
		assert.equal(v16.piVersion, "1.6.0", "the worker follows the Pi that runs");
		assert.notEqual(v16.id, job.id, "another Pi, another request");
		const odd = prepareJob({ ...loc, sessionId: "a\nb", token: sessionToken("a\nb") }, "l", undefined, 20000, now);
		assert.match(odd.id, /^prepare:[0-9a-f]{32}$/, "no newline in a header");
	});
});

describe("what a value says of its making", () => {
	test("builtOn and spanTokens are read as compactor writes them, and nothing else is trusted", () => {
		const v = {
			builtOn: { source: "model", sha256: "ab", fromEntryId: "e1", readAgainTokens: 1200, baseMadeAt: "2026-12-06T07:27:55.100Z", refused: "" },
			spanTokens: { model: 0, extract: 5400 },
		};
		assert.deepEqual(valueMaking(v), { spanTokens: { model: 0, extract: 5400 }, base: "model", baseMadeAt: "2026-12-06T07:27:55.100Z", readAgainTokens: 1200 });
		assert.deepEqual(valueMaking({ builtOn: { source: "none", via: "c0ffee01" } }), { base: "none", via: "c0ffee01" });
		assert.deepEqual(valueMaking({ builtOn: { source: "none", via: "a b" } }), { base: "none" });
		assert.deepEqual(valueMaking({ builtOn: { source: "model", segments: 2 } }), { base: "model", segments: 2 });
		assert.deepEqual(valueMaking({ builtOn: { source: "model", segments: -2 } }), { base: "model" });
		assert.deepEqual(valueMaking({ builtOn: { source: "compaction", refused: "entries-differ" }, spanTokens: { model: 900, extract: 100 } }), {
			spanTokens: { model: 900, extract: 100 },
			base: "compaction",
			baseRefused: "entries-differ",
		});
		// a value of an older worker says nothing; a bad one is not believed
		assert.deepEqual(valueMaking({ summary: "x" }), {});
		assert.deepEqual(valueMaking(undefined), {});
		assert.deepEqual(valueMaking({ builtOn: { source: "model\n[forged]" }, spanTokens: { model: -1, extract: 2 } }), {});
		assert.deepEqual(valueMaking({ builtOn: { source: "none", refused: 42, baseMadeAt: "not a date" }, spanTokens: { model: 1.5, extract: 0 } }), { base: "none" });
	});
});

describe("prepare trigger", () => {
	const knobs = { start: 0.05, step: 0.25 };
	// threshold = 100000 - 20000 = 80000, keep 10000: the room is 70000, the first request
	// needs 3500 tokens to summarize, a top-up 17500 tokens of growth since the first.
	const snap = (tokens: number | null, leafId: string, over: Partial<Snapshot> = {}, summarizable = Math.max(0, (tokens ?? 0) - 12_000)): Snapshot => ({
		tokens,
		contextWindow: 100_000,
		reserveTokens: 20_000,
		keepRecentTokens: 10_000,
		leafId,
		compactionId: null,
		summarizable: () => summarizable,
		lastCycleMs: 8000,
		...over,
	});
	// 1000 tokens a second while working, preparations take 10 s: a top-up's lead is 15000 tokens.
	const known: PaceEstimate = { tokensPerSecond: 1000, maxTurnTokens: 3000, latencyMs: 10_000, latencyMeasured: true };
	const unknown: PaceEstimate = { tokensPerSecond: undefined, maxTurnTokens: 0, latencyMs: 30_000, latencyMeasured: false };
	const fresh: Cycle = { compactionId: null, asks: 0 };
	const ask = (cycle: Cycle, s: Snapshot, pace: PaceEstimate, inFlight?: InFlight) => shouldAsk(cycle, inFlight, s, pace, knobs, 0);

	test("the first preparation as soon as a span worth it is summarizable, whatever the pace", () => {
		assert.equal(ask(fresh, snap(null, "a"), unknown).ask, false);
		assert.equal(ask(fresh, snap(15_000, "a", {}, 3_499), unknown).ask, false, "3499 tokens to summarize < 3500");
		const d = ask(fresh, snap(15_500, "a", {}, 3_500), unknown);
		assert.equal(d.ask, true);
		assert.equal(d.nth, 1);
		assert.match(d.why, /3500 tokens to summarize >= 3500/);
		// at any pace the agent might have: readiness first
		assert.equal(ask(fresh, snap(15_500, "a", {}, 3_500), { ...known, tokensPerSecond: 10 }).ask, true);
		// below keepRecentTokens + 3500 the branch is not even walked
		let walks = 0;
		ask(fresh, snap(13_499, "a", { summarizable: () => walks++ }), unknown);
		assert.equal(walks, 0);
	});

	test("never a request that cannot land before the threshold: nothing is spent on it", () => {
		// 80000 - 20000 = 60000 tokens to go at 1000 tokens/s: 60 s; a preparation takes 10 s
		assert.equal(ask(fresh, snap(20_000, "a"), known).ask, true);
		// at 10000 tokens/s: 6 s to go, less than a preparation takes
		const fast = { ...known, tokensPerSecond: 10_000 };
		const d = ask(fresh, snap(20_000, "a"), fast);
		assert.equal(d.ask, false);
		assert.match(d.why, /no preparation can land before Pi compacts: 60000 tokens to go at 10000 tokens\/s is 6.0 s, the last cycle took 8.0 s, a preparation takes 10.0 s/);
		// not before the latency was measured once: the guess may be wrong
		assert.equal(ask(fresh, snap(20_000, "a"), { ...fast, latencyMeasured: false }).ask, true);
		// not before a cycle was seen, nor when the last one (with the user's pauses) was long enough
		assert.equal(ask(fresh, snap(20_000, "a", { lastCycleMs: undefined }), fast).ask, true);
		assert.equal(ask(fresh, snap(20_000, "a", { lastCycleMs: 12_000 }), fast).ask, true);
	});

	test("at most one top-up: the latest turn that still lands, and only after enough growth", () => {
		const first: Cycle = { compactionId: null, asks: 1, firstTokens: 20_000, lastLeafId: "a" };
		assert.equal(ask(first, snap(40_000, "a"), known).ask, false, "same leaf");
		assert.match(ask(first, snap(37_499, "b"), known).why, /grew by 17499 < 17500/);
		// 60000 + 15000 + 3000 (a turn) < 80000: it can wait a turn
		assert.match(ask(first, snap(60_000, "b"), known).why, /top-up later/);
		const top = ask(first, snap(62_000, "b"), known);
		assert.equal(top.ask, true, "62000 + 15000 < 80000, but after one more turn of 3000 it would not be");
		assert.equal(top.nth, 2);
		assert.match(ask(first, snap(65_000, "b"), known).why, /a top-up would land too late/);
		assert.equal(ask(first, snap(62_000, "b"), unknown).ask, false, "no pace, no top-up");
		assert.equal(ask({ ...first, asks: 2 }, snap(62_000, "c"), known).ask, false, "two requests in this cycle");
	});

	test("one request in flight at a time", () => {
		const flying: InFlight = { requestedAt: 0, at: -4000, leafId: "a", nth: 1, compactionId: null };
		const d = ask(fresh, snap(30_000, "b"), known, flying);
		assert.equal(d.ask, false);
		assert.match(d.why, /requested 4.0 s ago is in flight/);
	});

	test("a compaction starts a new cycle", () => {
		const spent: Cycle = { compactionId: null, asks: 2, firstTokens: 20_000, lastLeafId: "a" };
		assert.equal(ask(spent, snap(20_000, "b", { compactionId: "comp1" }), known).ask, true, "compacted since");
		assert.equal(ask(spent, snap(20_000, "b"), known).ask, false, "same cycle");
	});

	test("no threshold, no ask", () => {
		assert.equal(ask(fresh, snap(90_000, "a", { contextWindow: 0 }), known).ask, false);
		assert.equal(ask(fresh, snap(90_000, "a", { contextWindow: 10_000 }), known).ask, false);
	});

	test("pace: every turn counts, the first of a run included; working time only", () => {
		const p = new Pace(30_000);
		assert.equal(p.estimate().tokensPerSecond, undefined);
		p.runStarted(10_000, 0);
		p.turnEnded(12_000, 1000); // the run's first turn: 2000 tokens in 1 s (a file read)
		assert.equal(p.estimate().tokensPerSecond, 2000);
		p.turnEnded(12_500, 2000);
		p.runStarted(12_500, 62_000); // the user thinks for a minute: not working time
		p.turnEnded(22_500, 63_000); // a 10000-token read in the next run's first turn counts
		assert.equal(p.estimate().maxTurnTokens, 10_000);
		assert.ok((p.estimate().tokensPerSecond ?? 0) > 2000, "the idle minute is not a sample, the read is");
		const before = p.estimate().tokensPerSecond;
		p.compacted(5000, 64_000); // the context shrank to 5000: the next turn grows from there
		p.turnEnded(6000, 65_000);
		assert.equal(p.estimate().tokensPerSecond, 0.7 * (before ?? 0) + 0.3 * 1000);
		assert.equal(p.estimate().latencyMeasured, false);
		p.preparationTook(5000);
		assert.deepEqual([p.estimate().latencyMs, p.estimate().latencyMeasured], [5000, true]);
		p.preparationTook(7000);
		assert.equal(p.estimate().latencyMs, 6000);
		p.preparationTook(-5); // skewed clocks
		p.preparationTook(3_600_000);
		assert.equal(p.estimate().latencyMs, 6000);
		assert.equal(lostAfterMs(p.estimate()), 12_000);
		assert.equal(lostAfterMs({ ...p.estimate(), latencyMs: 1_000 }), 10_000, "never before 10 s");
		assert.equal(lostAfterMs({ ...p.estimate(), latencyMs: 40_000 }), 80_000);
	});
});

describe("withDeadline", () => {
	test("returns the value, the failure, or a timeout, and never rejects", async () => {
		assert.deepEqual(await withDeadline(Promise.resolve(5), 1000), { ok: true, value: 5 });
		const err = new Error("boom");
		assert.deepEqual(await withDeadline(Promise.reject(err), 1000), { ok: false, reason: "error", error: err });
		let late: (v: number) => void = () => {};
		const slow = new Promise<number>((r) => {
			late = r;
		});
		assert.deepEqual(await withDeadline(slow, 20), { ok: false, reason: "timeout" });
		late(1);
		const ac = new AbortController();
		const p = withDeadline(new Promise(() => {}), 10_000, ac.signal);
		ac.abort();
		assert.deepEqual(await p, { ok: false, reason: "aborted" });
		const aborted = AbortSignal.abort();
		assert.deepEqual(await withDeadline(new Promise(() => {}), 10_000, aborted), { ok: false, reason: "aborted" });
	});
});

describe("preparableTokens (what a worker would prepare now)", () => {
	// One prompt = a user message, an assistant message calling three reads, three results of
	// 10,000 tokens each and the answer; keepRecentTokens 20,000 (smaller than one turn).
	let id = 0;
	const entry = (role: string, tokens: number, type = "message"): ProjectedEntry =>
		({ sourceEntry: { type, id: `e${++id}` }, messages: type === "compaction" ? [] : [{ role, tokens }] }) as unknown as ProjectedEntry;
	const est = (m: unknown) => (m as { tokens: number }).tokens;
	const turn = (answered: boolean) => [
		entry("user", 20),
		entry("assistant", 30),
		entry("toolResult", 10_000),
		entry("toolResult", 10_000),
		entry("toolResult", 10_000),
		...(answered ? [entry("assistant", 25)] : []),
	];
	const one = 20 + 30 + 30_000 + 25;

	test("a turn bigger than keepRecentTokens: the turns before the one Pi cuts in", () => {
		assert.equal(preparableTokens(turn(true), 20_000, est, false), 20 + 30 + 30_000, "one prompt: the cut splits it; it starts the span, so its prefix");
		assert.equal(preparableTokens([...turn(true), ...turn(true)], 20_000, est, false), one, "Pi 0.73");
		assert.equal(preparableTokens([...turn(true), ...turn(true)], 20_000, est, true), one, "Pi 1.x");
	});

	test("in the middle of a turn whose results fill keepRecentTokens: nothing under Pi 0.73, the turns before under Pi 1.x", () => {
		const mid = [...turn(true), ...turn(false)];
		assert.equal(preparableTokens(mid, 20_000, est, false), 0, "Pi 0.73 cuts at the span's first cut point");
		assert.equal(preparableTokens(turn(false), 20_000, est, false), 0, "the first turn, unanswered: no cut under Pi 0.73");
		assert.equal(preparableTokens(mid, 20_000, est, true), one, "Pi 1.x cuts at the last cut point");
	});

	test("the span starts after the latest compaction; small turns are cut at a turn start", () => {
		const small = (n: number) => Array.from({ length: n }, () => [entry("user", 100), entry("assistant", 100)]).flat();
		const span = [entry("", 0, "compaction"), ...small(10)];
		// 2,000 tokens after the compaction, keep 500: Pi keeps from the third-newest user message's turn.
		assert.equal(preparableTokens(span, 500, est, false), 1_400);
		assert.equal(preparableTokens(span, 5_000, est, false), 0, "everything fits in keepRecentTokens");
		assert.equal(preparableTokens([], 500, est, true), 0);
		// Pi 1.x's first request writes a system message: it is not history to summarize.
		const sys = [entry("system", 300), entry("user", 20), entry("assistant", 30), entry("toolResult", 800), entry("assistant", 400), entry("user", 20), entry("assistant", 30), entry("toolResult", 900), entry("assistant", 400)];
		assert.equal(preparableTokens(sys, 1_500, est, true), 20 + 30 + 800, "the first turn's prefix, the system message left out");
	});
});
