// The wire contract, both ways. Go's side generates src/wire.gen.ts (the types, subject roots,
// builders and each message's fields) and test/testdata/wire-samples.json (a Go-encoded
// message of every kind, Go's subjects for a set of session ids): `make wire`, and a Go test
// fails while either is stale. Here the extension decodes and checks Go's messages, names
// every subject as Go does, and every message it sends has only fields Go knows, of their JSON
// type, with every field Go requires.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import type { ExtensionContext, SessionBeforeCompactEvent } from "@earendil-works/pi-coding-agent";
import { type AtHook, bridgeRequest } from "../src/bridge.ts";
import type { HookState } from "../src/hookstate.ts";
import { finalEvent } from "../src/landing.ts";
import { hookReport } from "../src/metrics.ts";
import { bridgeSubject, eventSubject, hookSubject, prepareJob, prepareSubject, preparedKey, type SessionLocation, sessionToken, valueMaking } from "../src/session.ts";
import type { SessionState } from "../src/state.ts";
import { parseValue } from "../src/validate.ts";
import * as wire from "../src/wire.gen.ts";
import { EXT_DIR } from "./harness/nats.ts";

interface Samples {
	messages: Record<string, Record<string, unknown>>;
	subjects: Array<Record<string, string>>;
}
const samples = JSON.parse(readFileSync(join(EXT_DIR, "test", "testdata", "wire-samples.json"), "utf8")) as Samples;

/** kindOf is a JSON value's type in WireField's words. */
function kindOf(v: unknown): string {
	if (Array.isArray(v)) return "array";
	if (v === null) return "null";
	return typeof v === "object" ? "object" : typeof v;
}

/** conforms says what in obj is not message's as Go has it (nothing: it conforms), nested types included. */
function conforms(obj: object, message: string, at = message): string[] {
	const fields = wire.wireFields[message];
	assert.ok(fields, `no generated fields for ${message}`);
	const problems: string[] = [];
	for (const [k, v] of Object.entries(obj)) {
		const f = fields.find((x) => x.name === k);
		if (!f) problems.push(`${at}.${k}: Go has no such field`);
		else if (v === null ? !f.nullable : f.kind !== "unknown" && kindOf(v) !== f.kind) problems.push(`${at}.${k}: ${kindOf(v)}, Go's is ${f.kind}${f.nullable ? " or null" : ""}`);
	}
	for (const f of fields) if (!f.optional && !(f.name in obj)) problems.push(`${at}.${f.name}: missing, Go always writes it`);
	return problems;
}

const loc = (row: Record<string, string>): SessionLocation => ({ store: row.store, path: "p.jsonl", sessionId: row.sessionId, token: sessionToken(row.sessionId) });

describe("the wire contract, Go and the extension", () => {
	test("every subject and key the extension names is Go's, for ids used as they are and hashed", () => {
		assert.ok(samples.subjects.length >= 5);
		for (const row of samples.subjects) {
			const l = loc(row);
			assert.equal(l.token, row.token, `sessionToken(${JSON.stringify(row.sessionId)})`);
			assert.equal(prepareSubject(l), row.jobSubject);
			assert.equal(eventSubject(l), row.eventSubject);
			assert.equal(bridgeSubject(l), row.bridgeSubject);
			assert.equal(hookSubject(l), row.hookSubject);
			assert.equal(preparedKey(l), row.preparedKey);
			assert.equal(wire.jobEventSubject(l.store, l.token, row.seq), row.jobEventSubject);
			assert.equal(wire.preparedSubject(l.store, l.token), row.preparedSubject);
		}
	});

	test("Go's messages of every kind are what the generated fields say, and pass the extension's checks", () => {
		const m = samples.messages;
		for (const name of ["Job", "Event", "BridgeRequest", "BridgeReply", "HookReport", "Prepared"]) {
			assert.ok(m[name], `a sample ${name}`);
			assert.deepEqual(conforms(m[name], name), [], name);
		}
		// the prepared value, read from the bucket and from a bridge's reply
		const read = parseValue(m.Prepared);
		assert.equal(typeof read, "object", String(read));
		const bridged = parseValue(m.BridgeReply.prepared);
		assert.equal(typeof bridged, "object", String(bridged));
		assert.deepEqual(valueMaking(m.Prepared), {
			spanTokens: { model: 9000, extract: 400 }, base: "model", baseRefused: "entries-differ", baseMadeAt: "2026-12-07T03:03:05.6Z", readAgainTokens: 20, via: "c0mp4ct1", segments: 2,
		});
		// a worker's result event ends the request it names
		const ev = finalEvent(m.Event, loc({ store: m.Event.store as string, sessionId: m.Event.sessionId as string }));
		assert.deepEqual([ev?.jobId, ev?.jobSeq, ev?.outcome], [m.Job.id, 42, "done"]);
	});

	test("every message the extension sends has only Go's fields, of their JSON type, and every field Go requires", () => {
		const row = samples.subjects[0];
		const l = loc(row);
		const job = prepareJob(l, "1eaf0002", "focus on the tests", 1500, new Date(), "1.6.0");
		assert.deepEqual(conforms(job, "Job"), []);
		const at = {
			st: { sessionId: l.sessionId } as SessionState,
			loc: l,
			event: { preparation: { firstKeptEntryId: "f1r57k3p", settings: { keepRecentTokens: 1500, reserveTokens: 4000 } } } as unknown as SessionBeforeCompactEvent,
			ctx: { sessionManager: { getLeafId: () => "1eaf0003" }, model: { contextWindow: 20000 } } as unknown as ExtensionContext,
		} satisfies AtHook;
		assert.deepEqual(conforms({ ...bridgeRequest(at), extract: true }, "BridgeRequest"), []);
		const h: HookState = {
			outcome: "stale (too-big: x)", kind: "stale", result: "extract", reasonCode: "too-big", loc: l, bridged: 3, timing: "", making: { spanTokens: { model: 1, extract: 2 }, base: "model", baseRefused: "other-compaction" },
		};
		const report = hookReport(h, h.making, { sessionId: l.sessionId, counts: { "extract/too-big": 1 } } as unknown as SessionState, {
			ms: 8.5, piReason: "threshold", willRetry: false, event: at.event, ctx: at.ctx,
		});
		assert.deepEqual(conforms(report, "HookReport"), []);
		assert.deepEqual(conforms(report.spanTokens ?? {}, "SpanTokens", "HookReport.spanTokens"), []);
		for (const w of [report.outcome, report.result, report.reasonCode]) assert.ok([...wire.HookOutcomes, ...wire.HookResults, ...wire.HookReasons].includes(w as never), String(w));
	});
});
