// The extension's client under the permissions `compactor auth` prints (docs/security.md): a real
// nats-server started from the generated configuration, a real `compactor run` serving store
// hostA with its worker's key, and the extension with hostA's agent key. Its own store's flow
// works (prepare, its result event, read, bridge, the hook's report deleting the value); another store's is
// refused at once by the server, in compactor's words.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { PermissionViolationError } from "@nats-io/transport-node";
import { CompactorClient, notPermitted } from "../src/client.ts";
import { agentInboxPrefix } from "../src/config.ts";
import { bridgeSubject, eventSubject, hookSubject, prepareJob, prepareSubject, preparedKey, type ResultEvent, sessionToken } from "../src/session.ts";
import { type Fleet, startFleet } from "./harness/fleet.ts";

const PATH = "--home-dev-acme-api--/2025-11-07T08-30-00-000Z_019a5d6f-cf40-70d8-8e58-66b28cf3290e.jsonl";
const ID = "019a5d6f-cf40-70d8-8e58-66b28cf3290e";
const locA = { store: "hostA", path: PATH, sessionId: ID, token: sessionToken(ID) };
const locB = { ...locA, store: "hostB" };

async function until<T>(what: string, f: () => Promise<T | undefined>): Promise<T> {
	const deadline = performance.now() + 60_000;
	for (;;) {
		const v = await f();
		if (v !== undefined) return v;
		if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
		await new Promise((r) => setTimeout(r, 50));
	}
}

describe("CompactorClient under compactor auth's permissions", () => {
	let fleet: Fleet;
	before(async () => {
		fleet = await startFleet(["hostA", "hostB"]);
	});
	after(async () => {
		await fleet?.stop();
	});

	test("its own store's flow: prepare, read, bridge, and the value deleted once the hook reported", async () => {
		const c = new CompactorClient({ url: fleet.url, nkeySeedFile: fleet.seed("agent-hostA"), inboxPrefix: agentInboxPrefix([{ name: "hostA", dir: "" }]) });
		try {
			const lines = readFileSync(join(fleet.storeDir("hostA"), PATH), "utf8").trim().split("\n");
			const leaf = (JSON.parse(lines[lines.length - 1]) as { id: string }).id;
			// the worker's result event says the value is stored: heard on hostA's events, which its agent may hear
			const events: ResultEvent[] = [];
			const listening = await c.listen(`${eventSubject(locA)}.*`, (m) => events.push(m.json<ResultEvent>()), (err) => assert.fail(String(err)));
			const job = prepareJob(locA, leaf, undefined, 6000, new Date());
			const { outcome, seq } = await c.prepare(prepareSubject(locA), job);
			assert.equal(outcome, "queued");
			const ev = await until("the job's result event", async () => events.find((e) => e.jobSeq === seq && e.outcome !== "retry")).catch((err) => {
				throw new Error(`${err}\n${fleet.workerLog()}`);
			});
			listening.stop();
			assert.deepEqual([ev.v, ev.jobId, ev.store, ev.sessionId, ev.kind, ev.outcome], [1, job.id, "hostA", ID, "prepare", "done"]);
			assert.ok(!Number.isNaN(Date.parse(ev.at)), ev.at);
			const value = (await c.getPrepared(preparedKey(locA))) as { sessionId: string; firstKeptEntryId: string };
			assert.equal(value.sessionId, ID);
			const reply = await c.requestBridge(
				bridgeSubject(locA),
				{ v: 1, store: "hostA", path: PATH, sessionId: ID, leafId: leaf, firstKeptEntryId: "c9677744" },
				10_000,
			);
			assert.equal(reply.error, undefined, JSON.stringify(reply));
			assert.equal((reply.prepared as { firstKeptEntryId: string }).firstKeptEntryId, "c9677744", "bridged to the later cut");
			c.report(hookSubject(locA), { v: 1, store: "hostA", sessionId: ID, outcome: "hit", latencyMs: 5, bridged: true });
			await until("the used value deleted", async () => ((await c.getPrepared(preparedKey(locA))) === undefined ? true : undefined));
			console.log(`hostA: prepared (cut ${value.firstKeptEntryId}), bridged to c9677744, deleted once the hook reported`);
		} finally {
			await c.close();
		}
	});

	test("another store's: refused at once by the server, said as compactor says it", async () => {
		const c = new CompactorClient({ url: fleet.url, nkeySeedFile: fleet.seed("agent-hostA"), inboxPrefix: "_INBOX_agent_hostA" });
		try {
			const attempts: Array<[string, () => Promise<unknown>]> = [
				["publish a prepare job for hostB", () => c.publishPrepare(prepareSubject(locB), prepareJob(locB, "x", "steer it", 6000, new Date()))],
				["read hostB's prepared value", () => c.getPrepared(preparedKey(locB))],
				["ask hostB's bridge", () => c.requestBridge(bridgeSubject(locB), { v: 1, store: "hostB", path: PATH, sessionId: ID, leafId: "x", firstKeptEntryId: "y" }, 30_000)],
				["hear hostB's events", () => c.listen(`${eventSubject(locB)}.*`, () => {}, () => {})],
			];
			let slowest = 0;
			for (const [what, f] of attempts) {
				const t0 = performance.now();
				const err = await f().then(
					() => undefined,
					(e: unknown) => e,
				);
				slowest = Math.max(slowest, performance.now() - t0);
				assert.ok(err !== undefined, `${what}: allowed`);
				const words = notPermitted(err, ["hostA"]);
				assert.ok(words?.startsWith("not permitted: "), `${what}: ${String(err)}`);
				assert.match(words ?? "", /hostB/, what);
			}
			console.log(`hostB from hostA's agent: ${attempts.length} of ${attempts.length} refused, slowest ${slowest.toFixed(1)} ms`);
		} finally {
			await c.close();
		}
	});

	test("without its inbox prefix no reply reaches it: the default _INBOX is not the agent's", async () => {
		const c = new CompactorClient({ url: fleet.url, nkeySeedFile: fleet.seed("agent-hostA") });
		try {
			const err = await c.getPrepared(preparedKey(locA)).then(
				() => undefined,
				(e: unknown) => e,
			);
			assert.ok(err instanceof PermissionViolationError || notPermitted(err, []) !== undefined, String(err));
			assert.match(notPermitted(err, ["hostA"]) ?? "", /_INBOX\./);
		} finally {
			await c.close();
		}
	});
});
