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
import { locateSession, prepareJob, prepareSubject, preparedKey, sessionToken } from "../src/session.ts";
import { type LastAsk, Pace, type PaceEstimate, type Snapshot, shouldAsk } from "../src/trigger.ts";

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
		assert.equal(c.prepareFraction, 0.5);
		assert.equal(c.prepareStep, 0.25);
		assert.equal(c.prepareLatencyMs, 30_000);
		assert.equal(c.deadlineMs, 200);
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
		};
		const d = loadConfig(env, "/a");
		assert.equal(d.nats.url, "nats://fallback:4222");
		assert.equal(d.nats.token, "s3cret");
		assert.equal(d.nats.credsFile, "/etc/nats.creds");
		assert.equal(d.prepareFraction, 0.6);
		assert.equal(d.prepareLatencyMs, 8000);
		assert.equal(d.deadlineMs, 150);
		assert.deepEqual(d.stores, [{ name: "team", dir: "/srv/s" }]);
		assert.equal(d.debug, true);
		assert.equal(loadConfig({ ...env, COMPACTOR_NATS_URL: "nats://main:4222" }, "/a").nats.url, "nats://main:4222");

		const f = loadConfig(env, "/a", { fraction: "0.9", deadlineMs: "50", off: true });
		assert.equal(f.prepareFraction, 0.9);
		assert.equal(f.deadlineMs, 50);
		assert.equal(f.enabled, false);
		assert.equal(loadConfig({ COMPACTOR_EXTENSION: "off" }, "/a").enabled, false);

		const bad = loadConfig({ COMPACTOR_PREPARE_FRACTION: "2", COMPACTOR_PREPARE_DEADLINE_MS: "soon", COMPACTOR_PREPARE_LATENCY_MS: "-1" }, "/a");
		assert.equal(bad.prepareFraction, 0.5);
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
		const odd = prepareJob({ ...loc, sessionId: "a\nb", token: sessionToken("a\nb") }, "l", undefined, 20000, now);
		assert.match(odd.id, /^prepare:[0-9a-f]{32}$/, "no newline in a header");
	});
});

describe("prepare trigger", () => {
	const knobs = { fraction: 0.5, step: 0.25 };
	// threshold = 100000 - 20000 = 80000: the floor is 40000, the backstop 68000, a top-up step 20000
	const snap = (tokens: number | null, leafId: string, over: Partial<Snapshot> = {}, onBranch = (_: string) => true, compaction: string | null = null): Snapshot => ({
		tokens,
		contextWindow: 100_000,
		reserveTokens: 20_000,
		leafId,
		branch: () => ({ latestCompactionId: compaction, onBranch }),
		...over,
	});
	// 1000 tokens a second while working, preparations take 10 s: the lead is 15000 tokens.
	const known: PaceEstimate = { tokensPerSecond: 1000, maxTurnTokens: 3000, latencyMs: 10_000 };
	const unknown: PaceEstimate = { tokensPerSecond: undefined, maxTurnTokens: 0, latencyMs: 30_000 };

	test("never below the floor; at the floor when the pace is not known yet", () => {
		assert.equal(shouldAsk(undefined, snap(39_999, "a"), unknown, knobs).ask, false);
		assert.equal(shouldAsk(undefined, snap(null, "a"), unknown, knobs).ask, false);
		const d = shouldAsk(undefined, snap(40_000, "a"), unknown, knobs);
		assert.equal(d.ask, true);
		assert.equal(d.nth, 1);
	});

	test("just in time: when the pace would reach the threshold within the preparation's time", () => {
		assert.equal(shouldAsk(undefined, snap(64_999, "a"), known, knobs).ask, false, "80000 - 15000 = 65000 not reached");
		assert.equal(shouldAsk(undefined, snap(65_000, "a"), known, knobs).ask, true);
		// A slow agent is asked for later; one big turn brings it forward.
		const slow = { ...known, tokensPerSecond: 100, maxTurnTokens: 0 }; // lead 1500 tokens
		const bigTurns = { ...slow, maxTurnTokens: 14_000 };
		assert.equal(shouldAsk(undefined, snap(65_999, "a"), bigTurns, knobs).ask, false);
		assert.equal(shouldAsk(undefined, snap(66_000, "a"), bigTurns, knobs).ask, true, "one turn of 14000 away");
		// Whatever the pace, the backstop.
		assert.equal(shouldAsk(undefined, snap(67_999, "a"), slow, knobs).ask, false);
		assert.equal(shouldAsk(undefined, snap(68_000, "a"), slow, knobs).ask, true);
	});

	test("one request per cycle, at most one top-up, and only when it can land in time", () => {
		const last: LastAsk = { leafId: "a", tokens: 40_000, compactionId: null, asks: 1 };
		assert.equal(shouldAsk(last, snap(70_000, "a"), known, knobs).ask, false, "same leaf");
		assert.equal(shouldAsk(last, snap(59_999, "b"), known, knobs).ask, false, "grew less than a step");
		const top = shouldAsk(last, snap(60_000, "b"), known, knobs);
		assert.equal(top.ask, true, "grew by a step, and 60000 + 15000 < 80000");
		assert.equal(top.nth, 2);
		assert.equal(shouldAsk(last, snap(66_000, "b"), known, knobs).ask, false, "a top-up now would land after the threshold");
		assert.equal(shouldAsk(last, snap(60_000, "b"), unknown, knobs).ask, false, "no pace, no top-up");
		assert.equal(shouldAsk({ ...last, asks: 2 }, snap(79_000, "b"), known, knobs).ask, false, "two requests in this cycle");
	});

	test("a compaction or a branch switch starts a new cycle", () => {
		const last: LastAsk = { leafId: "a", tokens: 70_000, compactionId: null, asks: 2 };
		assert.equal(shouldAsk(last, snap(66_000, "b", {}, () => true, "comp1"), known, knobs).ask, true, "compacted since");
		assert.equal(shouldAsk(last, snap(66_000, "b", {}, () => false), known, knobs).ask, true, "branch left the asked leaf");
		assert.equal(shouldAsk(last, snap(50_000, "b", {}, () => true, "comp1"), known, knobs).ask, false, "new cycle, not due yet");
	});

	test("no threshold, no ask", () => {
		assert.equal(shouldAsk(undefined, snap(90_000, "a", { contextWindow: 0 }), known, knobs).ask, false);
		assert.equal(shouldAsk(undefined, snap(90_000, "a", { contextWindow: 10_000 }), known, knobs).ask, false);
	});

	test("the branch is walked only when the decision needs it", () => {
		let walks = 0;
		const s = snap(10_000, "b", {
			branch: () => {
				walks++;
				return { latestCompactionId: null, onBranch: () => true };
			},
		});
		shouldAsk({ leafId: "a", tokens: 1, compactionId: null, asks: 1 }, s, known, knobs);
		assert.equal(walks, 0);
	});

	test("pace: working time only, and the first measured latency replaces the guess", () => {
		const p = new Pace(30_000);
		assert.equal(p.estimate().tokensPerSecond, undefined);
		p.turnEnded(10_000, 0);
		p.turnEnded(12_000, 1000); // 2000 tokens in 1 s
		assert.equal(p.estimate().tokensPerSecond, 2000);
		p.runStarted(); // the user thinks for a minute: not working time
		p.turnEnded(12_500, 61_000);
		assert.equal(p.estimate().tokensPerSecond, 2000, "the idle minute is not a sample");
		p.turnEnded(14_500, 62_000);
		assert.equal(p.estimate().tokensPerSecond, 2000);
		assert.equal(p.estimate().maxTurnTokens, 2000);
		p.compacted();
		p.turnEnded(5000, 63_000); // the context shrank: no sample
		assert.equal(p.estimate().tokensPerSecond, 2000);
		p.preparationTook(5000);
		assert.equal(p.estimate().latencyMs, 5000);
		p.preparationTook(7000);
		assert.equal(p.estimate().latencyMs, 6000);
		p.preparationTook(-5); // skewed clocks
		p.preparationTook(3_600_000);
		assert.equal(p.estimate().latencyMs, 6000);
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
