// Configuration, naming (session token, store and path, job) and the prepare trigger.

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { withDeadline } from "../src/client.ts";
import { describeNats, loadConfig, parseStores, readPiCompactionSettings } from "../src/config.ts";
import { locateSession, prepareJob, prepareSubject, preparedKey, sessionToken } from "../src/session.ts";
import { type LastAsk, type Snapshot, shouldAsk } from "../src/trigger.ts";

const here = dirname(fileURLToPath(import.meta.url));

describe("config", () => {
	test("stores parse as the Go CLI parses them", () => {
		assert.deepEqual(parseStores("team=/srv/a, solo=/srv/b;/srv/c").stores, [
			{ name: "team", dir: "/srv/a" },
			{ name: "solo", dir: "/srv/b" },
			{ name: "default", dir: "/srv/c" },
		]);
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
		assert.equal(c.prepareFraction, 0.7);
		assert.equal(c.deadlineMs, 200);
		assert.equal(c.debug, false);

		const env = {
			NATS_URL: "nats://fallback:4222",
			COMPACTOR_NATS_TOKEN: "s3cret",
			NATS_CREDS: "/etc/nats.creds",
			COMPACTOR_PREPARE_FRACTION: "0.5",
			COMPACTOR_PREPARE_DEADLINE_MS: "150",
			COMPACTOR_STORES: "team=/srv/s",
			COMPACTOR_DEBUG: "1",
		};
		const d = loadConfig(env, "/a");
		assert.equal(d.nats.url, "nats://fallback:4222");
		assert.equal(d.nats.token, "s3cret");
		assert.equal(d.nats.credsFile, "/etc/nats.creds");
		assert.equal(d.prepareFraction, 0.5);
		assert.equal(d.deadlineMs, 150);
		assert.deepEqual(d.stores, [{ name: "team", dir: "/srv/s" }]);
		assert.equal(d.debug, true);
		assert.equal(loadConfig({ ...env, COMPACTOR_NATS_URL: "nats://main:4222" }, "/a").nats.url, "nats://main:4222");

		const f = loadConfig(env, "/a", { fraction: "0.9", deadlineMs: "50", off: true });
		assert.equal(f.prepareFraction, 0.9);
		assert.equal(f.deadlineMs, 50);
		assert.equal(f.enabled, false);
		assert.equal(loadConfig({ COMPACTOR_EXTENSION: "off" }, "/a").enabled, false);

		const bad = loadConfig({ COMPACTOR_PREPARE_FRACTION: "2", COMPACTOR_PREPARE_DEADLINE_MS: "soon" }, "/a");
		assert.equal(bad.prepareFraction, 0.7);
		assert.equal(bad.deadlineMs, 200);
		assert.equal(bad.problems.length, 2);
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
		const job = prepareJob(loc, "leaf0001", undefined, now);
		assert.deepEqual(Object.keys(job), ["v", "kind", "store", "path", "sessionId", "reason", "requestedAt", "expectLeafId", "id"]);
		assert.equal(job.v, 1);
		assert.equal(job.kind, "prepare");
		assert.equal(job.reason, "extension");
		assert.equal(job.requestedAt, "2026-03-04T05:06:07.000Z");
		assert.equal(job.expectLeafId, "leaf0001");
		assert.match(job.id, /^prepare:team:0199-abc:leaf0001:[0-9a-f]{16}$/);
		assert.equal(prepareSubject(loc), "compactor.jobs.team.0199-abc.prepare");
		assert.equal(prepareJob(loc, "leaf0001", undefined, new Date()).id, job.id, "same request, same id");
		assert.notEqual(prepareJob(loc, "leaf0002", undefined, now).id, job.id);
		const focused = prepareJob(loc, "leaf0001", " Focus ", now);
		assert.equal(focused.instructions, "Focus");
		assert.notEqual(focused.id, job.id);
		const odd = prepareJob({ ...loc, sessionId: "a\nb", token: sessionToken("a\nb") }, "l", undefined, now);
		assert.match(odd.id, /^prepare:[0-9a-f]{32}$/, "no newline in a header");
	});
});

describe("prepare trigger", () => {
	const knobs = { fraction: 0.7, step: 0.1 };
	// threshold = 100000 - 20000 = 80000; starts at 56000; a step is 8000
	const snap = (tokens: number | null, leafId: string, over: Partial<Snapshot> = {}, onBranch = (_: string) => true, compaction: string | null = null): Snapshot => ({
		tokens,
		contextWindow: 100_000,
		reserveTokens: 20_000,
		leafId,
		branch: () => ({ latestCompactionId: compaction, onBranch }),
		...over,
	});

	test("asks once past the fraction, then only on change or growth", () => {
		assert.equal(shouldAsk(undefined, snap(55_999, "a"), knobs).ask, false);
		assert.equal(shouldAsk(undefined, snap(null, "a"), knobs).ask, false);
		assert.equal(shouldAsk(undefined, snap(56_000, "a"), knobs).ask, true);
		const last: LastAsk = { leafId: "a", tokens: 56_000, compactionId: null };
		assert.equal(shouldAsk(last, snap(70_000, "a"), knobs).ask, false, "same leaf");
		assert.equal(shouldAsk(last, snap(63_999, "b"), knobs).ask, false, "grew less than a step");
		assert.equal(shouldAsk(last, snap(64_000, "b"), knobs).ask, true, "grew by a step");
		assert.equal(shouldAsk(last, snap(57_000, "b", {}, () => false), knobs).ask, true, "branch left the asked leaf");
		assert.equal(shouldAsk(last, snap(57_000, "b", {}, () => true, "comp1"), knobs).ask, true, "compacted since");
	});

	test("no threshold, no ask", () => {
		assert.equal(shouldAsk(undefined, snap(90_000, "a", { contextWindow: 0 }), knobs).ask, false);
		assert.equal(shouldAsk(undefined, snap(90_000, "a", { contextWindow: 10_000 }), knobs).ask, false);
	});

	test("the branch is walked only when the decision needs it", () => {
		let walks = 0;
		const s = snap(10_000, "b", {
			branch: () => {
				walks++;
				return { latestCompactionId: null, onBranch: () => true };
			},
		});
		shouldAsk({ leafId: "a", tokens: 1, compactionId: null }, s, knobs);
		assert.equal(walks, 0);
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
