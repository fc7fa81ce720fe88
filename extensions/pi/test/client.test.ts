// The NATS client against a real nats-server: prepare publishes (queued, duplicate, pending),
// prepared values (absent, present, deleted, malformed), and what happens when NATS is down,
// unreachable or hanging.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { CompactorClient, withDeadline } from "../src/client.ts";
import { prepareJob, prepareSubject, preparedKey } from "../src/session.ts";
import { freePort, type NatsServer, silentListener, startNats } from "./harness/nats.ts";

const loc = { store: "team", path: "--p--/s.jsonl", sessionId: "0199-test", token: "0199-test" };

describe("CompactorClient on a real nats-server", () => {
	let nats: NatsServer;
	before(async () => {
		nats = await startNats();
	});
	after(async () => {
		await nats.stop();
	});

	test("publishes a prepare job: queued, then duplicate, then pending for another leaf", async () => {
		const c = new CompactorClient({ url: nats.url });
		try {
			const job = prepareJob(loc, "leaf0001", undefined, 20000, new Date());
			assert.equal(await c.publishPrepare(prepareSubject(loc), job), "queued");
			assert.equal(await c.publishPrepare(prepareSubject(loc), job), "duplicate");
			const next = prepareJob(loc, "leaf0002", undefined, 20000, new Date());
			assert.equal(await c.publishPrepare(prepareSubject(loc), next), "pending", "one pending job per session (err_code 10077)");

			// What the worker receives: the job as published, with its id as Nats-Msg-Id.
			const jsm = await jetstreamManager(nats.nc);
			const msg = await jsm.streams.getMessage("COMPACTOR_JOBS", { last_by_subj: prepareSubject(loc) });
			assert.ok(msg);
			assert.equal(msg.header?.get("Nats-Msg-Id"), job.id);
			assert.deepEqual(msg.json(), job);
		} finally {
			await c.close();
		}
	});

	test("reads prepared values: absent, present, deleted, not JSON", async () => {
		const kv = await new Kvm(nats.nc).open("COMPACTOR_PREPARED");
		const key = preparedKey({ ...loc, sessionId: "s2", token: "s2" });
		const c = new CompactorClient({ url: nats.url });
		try {
			assert.equal(await c.getPrepared(key), undefined);
			await kv.put(key, JSON.stringify({ v: 1, summary: "x" }));
			assert.deepEqual(await c.getPrepared(key), { v: 1, summary: "x" });
			await kv.delete(key);
			assert.equal(await c.getPrepared(key), undefined);
			await kv.put(key, "not json");
			await assert.rejects(c.getPrepared(key));
		} finally {
			await c.close();
		}
	});

	test("one connection is reused across calls", async () => {
		const mon = await startNats({ monitor: true });
		const c = new CompactorClient({ url: mon.url });
		const ours = async () => {
			const connz = (await (await fetch(`${mon.monitorUrl}/connz`)).json()) as { connections: Array<{ name?: string }> };
			return connz.connections.filter((x) => x.name === "compactor-pi-extension").length;
		};
		try {
			assert.equal(await ours(), 0, "nothing dials before it is needed");
			c.warm();
			const until = performance.now() + 5000;
			while ((await ours()) === 0 && performance.now() < until) await new Promise((r) => setTimeout(r, 20));
			assert.equal(await ours(), 1, "warm() dials in the background");
			c.warm();
			for (let i = 0; i < 5; i++) {
				await c.getPrepared("team.none");
				await c.publishPrepare(prepareSubject(loc), prepareJob(loc, `leaf${i}`, undefined, 20000, new Date()));
			}
			const connz = (await (await fetch(`${mon.monitorUrl}/connz`)).json()) as { num_connections: number };
			assert.equal(await ours(), 1);
			assert.equal(connz.num_connections, 2, "the test's own connection and the client's");
		} finally {
			await c.close();
			await mon.stop();
		}
	});

	test("a closed client refuses work instead of reconnecting", async () => {
		const c = new CompactorClient({ url: nats.url });
		await c.getPrepared("team.none");
		await c.close();
		await assert.rejects(c.getPrepared("team.none"), /closed/);
	});
});

describe("CompactorClient when NATS is not there", () => {
	test("a refused port fails fast, then cools down without dialing", async () => {
		const port = await freePort();
		const c = new CompactorClient({ url: `nats://127.0.0.1:${port}` }, { cooldownMs: 60_000 });
		const t0 = performance.now();
		const r = await withDeadline(c.getPrepared("team.x"), 200);
		assert.equal(r.ok, false);
		assert.equal(r.ok === false && r.reason, "error");
		const r2 = await withDeadline(c.getPrepared("team.x"), 200);
		assert.ok(r2.ok === false && r2.reason === "error" && /not dialing again/.test(String((r2 as { error: unknown }).error)));
		console.log(`refused port: two failed reads in ${(performance.now() - t0).toFixed(1)} ms`);
		await c.close();
	});

	test("a server that accepts and never answers is cut off by the deadline", async () => {
		const silent = await silentListener();
		const c = new CompactorClient({ url: silent.url }, { connectTimeoutMs: 1000 });
		try {
			const t0 = performance.now();
			const r = await withDeadline(c.getPrepared("team.x"), 200);
			const ms = performance.now() - t0;
			assert.deepEqual(r, { ok: false, reason: "timeout" });
			console.log(`hanging server: gave up after ${ms.toFixed(1)} ms (deadline 200)`);
			// the connect attempt itself ends later, in the background, without an unhandled rejection
			await new Promise((r) => setTimeout(r, 1200));
		} finally {
			await c.close();
			await silent.close();
		}
	});

	test("a server stopped under an open connection: reads time out, publishes fail, nothing throws", async () => {
		const nats = await startNats();
		const c = new CompactorClient({ url: nats.url }, { publishTimeoutMs: 300 });
		try {
			assert.equal(await c.getPrepared("team.none"), undefined);
			await nats.stop();
			const r = await withDeadline(c.getPrepared("team.none"), 200);
			assert.equal(r.ok, false);
			const p = await withDeadline(c.publishPrepare(prepareSubject(loc), prepareJob(loc, "l", undefined, 20000, new Date())), 2000);
			assert.equal(p.ok, false);
		} finally {
			const closed = await withDeadline(c.close(), 2000);
			assert.equal(closed.ok, true, "close is quick even while reconnecting");
		}
	});

	test("no bucket yet: the read fails (the hook treats it as a miss)", async () => {
		const nats = await startNats();
		try {
			const jsm = await jetstreamManager(nats.nc);
			await jsm.streams.delete("KV_COMPACTOR_PREPARED");
			const c = new CompactorClient({ url: nats.url });
			await assert.rejects(c.getPrepared("team.none"));
			await c.close();
		} finally {
			await nats.stop();
		}
	});
});
