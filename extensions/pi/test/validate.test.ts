// The validation rules on real Pi session entries: sessions built with Pi's own
// SessionManager, the corpus files Pi wrote, and Pi's own prepareCompaction as the reference
// for what a valid preparation summarizes.

import assert from "node:assert/strict";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import type { SessionEntry } from "@earendil-works/pi-coding-agent";
import { type CheckInput, checkPrepared, type PreparedValue } from "../src/validate.ts";
import { REPO_ROOT } from "./harness/nats.ts";
import { has } from "../src/rules.ts";
import {
	buildContextEntries,
	buildSessionProjection,
	computeFileLists,
	estimateTokens,
	idsOfPiMessages,
	PI_LIB_VERSION,
	prepareCompaction,
	SessionManager,
	sessionEntryToContextMessages,
} from "./harness/pilib.ts";
import { assistant, branchOf, newSession, turn, user } from "./harness/sessions.ts";

const STORE = "team";
const SUMMARY = "## Goal\nPrepared by compactor.\n\n<read-files>\nsrc/mod1.ts\n</read-files>";
const settings = (keepRecentTokens: number) => ({ enabled: true, reserveTokens: 16384, keepRecentTokens });

/** valueFromPi is the value a correct compactor would store: Pi's own cut at the path's leaf. */
function valueFromPi(path: SessionEntry[], sessionId: string, keep: number, extra: Partial<PreparedValue> = {}): PreparedValue {
	const prep = prepareCompaction(path, settings(keep));
	assert.ok(prep, "Pi prepared nothing");
	let prev: string | null = null;
	for (const e of path) if (e.type === "compaction") prev = e.id;
	return {
		v: 1,
		store: STORE,
		path: "a/b.jsonl",
		sessionId,
		leafId: path[path.length - 1].id,
		firstKeptEntryId: prep.firstKeptEntryId,
		previousCompactionId: prev,
		summarizedEntryIds: idsOfPiMessages(path, [...prep.messagesToSummarize, ...prep.turnPrefixMessages]),
		tokensBefore: prep.tokensBefore,
		summary: SUMMARY,
		details: computeFileLists(prep.fileOps),
		customInstructions: "",
		...extra,
	};
}

/** project is the host Pi's projection, as the extension passes it (Pi >= 0.87 only). */
const projectWith = buildSessionProjection;
const project: CheckInput["project"] = projectWith ? (path) => projectWith(path) as ReturnType<NonNullable<CheckInput["project"]>> : undefined;
/** entryMessages is how Pi 0.80.6 .. 0.86 builds its context, as the extension passes it. */
const entryMessages: CheckInput["entryMessages"] =
	!project && buildContextEntries && sessionEntryToContextMessages
		? {
				contextEntries: (path) => buildContextEntries?.(path) ?? path,
				contextMessages: (e) => (sessionEntryToContextMessages?.(e) ?? []) as ReturnType<NonNullable<CheckInput["entryMessages"]>["contextMessages"]>,
				systemMessages: has(PI_LIB_VERSION, "SystemMessages"),
			}
		: undefined;

function input(value: unknown, path: SessionEntry[], sessionId: string, over: Partial<CheckInput> = {}): CheckInput {
	return {
		value,
		sessionId,
		store: STORE,
		branchEntries: path,
		customInstructions: undefined,
		contextWindow: 200_000,
		reserveTokens: 16384,
		tokensBefore: 4242,
		estimate: (m) => estimateTokens(m),
		project,
		entryMessages,
		...over,
	};
}

function refusal(inp: CheckInput): string {
	const r = checkPrepared(inp);
	assert.equal(r.ok, false, "expected a refusal");
	return r.ok ? "" : r.refusal;
}

/** A session of n runs with tool calls, built by Pi's SessionManager. */
function session(n: number) {
	const sm = newSession();
	for (let i = 0; i < n; i++) turn(sm, i);
	return sm;
}

describe("checkPrepared on sessions built with Pi's SessionManager", () => {
	test("accepts Pi's own cut and returns it in Pi's shape", () => {
		const sm = session(6);
		const path = branchOf(sm);
		const v = valueFromPi(path, sm.getSessionId(), 2000);
		assert.ok(v.summarizedEntryIds.length > 0, "the session is big enough to summarize something");
		const r = checkPrepared(input(v, path, sm.getSessionId()));
		assert.ok(r.ok, JSON.stringify(r));
		assert.deepEqual(Object.keys(r.compaction), ["summary", "firstKeptEntryId", "tokensBefore", "details"]);
		assert.equal(r.compaction.summary, SUMMARY);
		assert.equal(r.compaction.firstKeptEntryId, v.firstKeptEntryId);
		assert.equal(r.compaction.tokensBefore, 4242, "tokensBefore is Pi's current count, not the prepared one");
		assert.deepEqual(r.compaction.details, v.details);
		assert.deepEqual(Object.keys(r.compaction.details), ["readFiles", "modifiedFiles"]);
		assert.ok(v.details.modifiedFiles.length > 0 && v.details.readFiles.length > 0);
	});

	test("stays valid while the session grows past the prepared leaf", () => {
		const sm = session(6);
		const v = valueFromPi(branchOf(sm), sm.getSessionId(), 2000);
		const before = checkPrepared(input(v, branchOf(sm), sm.getSessionId()));
		turn(sm, 100);
		turn(sm, 101);
		const after = checkPrepared(input(v, branchOf(sm), sm.getSessionId()));
		assert.ok(before.ok && after.ok);
		assert.ok(after.keptTokens > before.keptTokens, "the new entries are kept verbatim and counted");
	});

	test("counts what Pi's context will hold after the compaction", () => {
		for (const n of [3, 6, 9]) {
			const sm = session(n);
			const v = valueFromPi(branchOf(sm), sm.getSessionId(), 1500);
			turn(sm, 200);
			const r = checkPrepared(input(v, branchOf(sm), sm.getSessionId()));
			assert.ok(r.ok, JSON.stringify(r));
			// Let Pi append the compaction and rebuild its context: its estimate is ours.
			sm.appendCompaction(r.compaction.summary, r.compaction.firstKeptEntryId, r.compaction.tokensBefore, r.compaction.details, true);
			const piTokens = sm.buildSessionContext().messages.reduce((s: number, m: unknown) => s + estimateTokens(m), 0);
			assert.equal(r.summaryTokens + r.keptTokens, piTokens);
		}
	});

	test("refuses a value whose leaf is on a branch left with /tree", () => {
		const sm = session(5);
		const path = branchOf(sm);
		const v = valueFromPi(path, sm.getSessionId(), 2000);
		// Go back to an earlier answer and continue there: the prepared leaf is on another branch.
		const earlier = path.filter((e) => e.type === "message" && e.message.role === "assistant")[6].id;
		sm.branch(earlier);
		user(sm, "Different direction.");
		assistant(sm, "Sure.");
		assert.equal(refusal(input(v, branchOf(sm), sm.getSessionId())), "leaf-off-branch");
	});

	test("refuses a value built on another compaction (or on none)", () => {
		const sm = session(6);
		const v = valueFromPi(branchOf(sm), sm.getSessionId(), 2000);
		const prep = prepareCompaction(branchOf(sm), settings(2000));
		assert.ok(prep);
		sm.appendCompaction("Pi's summary", prep.firstKeptEntryId, prep.tokensBefore, computeFileLists(prep.fileOps), false);
		turn(sm, 50);
		assert.equal(refusal(input(v, branchOf(sm), sm.getSessionId())), "previous-compaction");

		const fresh = session(6);
		const claims = valueFromPi(branchOf(fresh), fresh.getSessionId(), 2000, { previousCompactionId: "abcd1234" });
		assert.equal(refusal(input(claims, branchOf(fresh), fresh.getSessionId())), "previous-compaction");
	});

	test("after a compaction, summarizes from its kept boundary, or from the entry after it", () => {
		for (const firstKept of ["real", "missing"] as const) {
			const sm = session(6);
			const prep = prepareCompaction(branchOf(sm), settings(2000));
			assert.ok(prep);
			const kept = firstKept === "real" ? prep.firstKeptEntryId : "notthere";
			sm.appendCompaction("Earlier summary", kept, prep.tokensBefore, computeFileLists(prep.fileOps), false);
			for (let i = 0; i < 5; i++) turn(sm, 60 + i);
			const path = branchOf(sm);
			const v = valueFromPi(path, sm.getSessionId(), 2000);
			assert.ok(v.previousCompactionId);
			const r = checkPrepared(input(v, path, sm.getSessionId()));
			assert.ok(r.ok, `${firstKept}: ${JSON.stringify(r)}`);
			const startId = v.summarizedEntryIds[0];
			const compIdx = path.findIndex((e) => e.id === v.previousCompactionId);
			const expectStart = firstKept === "real" ? prep.firstKeptEntryId : path[compIdx + 1].id;
			assert.equal(startId, expectStart);
		}
	});

	test("refuses a value whose summarized entries differ from the branch's", () => {
		const sm = session(6);
		const path = branchOf(sm);
		const v = valueFromPi(path, sm.getSessionId(), 2000);
		const ids = v.summarizedEntryIds;
		const variants: string[][] = [
			ids.slice(1),
			ids.slice(0, -1),
			[...ids, "extra123"],
			[ids[1], ids[0], ...ids.slice(2)],
			// a non-message entry (the model_change) counted as summarized
			[path[0].id, ...ids],
		];
		for (const summarizedEntryIds of variants) {
			assert.equal(refusal(input({ ...v, summarizedEntryIds }, path, sm.getSessionId())), "entries-differ");
		}
	});

	test("custom instructions must be the prepared ones", () => {
		const sm = session(5);
		const path = branchOf(sm);
		const id = sm.getSessionId();
		const plain = valueFromPi(path, id, 2000);
		assert.equal(refusal(input(plain, path, id, { customInstructions: "Focus on the tests" })), "instructions");
		const focused = { ...plain, customInstructions: "Focus on the tests" };
		assert.ok(checkPrepared(input(focused, path, id, { customInstructions: "  Focus on the tests " })).ok);
		assert.equal(refusal(input(focused, path, id, { customInstructions: undefined })), "instructions");
		assert.equal(refusal(input(focused, path, id, { customInstructions: "Focus on the docs" })), "instructions");
		// "" and no instructions are the same request
		assert.ok(checkPrepared(input({ ...plain, customInstructions: undefined }, path, id, { customInstructions: "" })).ok);
	});

	test("refuses cuts Pi must never get", () => {
		const sm = session(6);
		const path = branchOf(sm);
		const id = sm.getSessionId();
		const v = valueFromPi(path, id, 2000);
		const tr = path.find((e) => e.type === "message" && e.message.role === "toolResult" && path.indexOf(e) > path.findIndex((x) => x.id === v.firstKeptEntryId));
		assert.ok(tr);
		assert.equal(refusal(input({ ...v, firstKeptEntryId: tr.id }, path, id)), "cut-on-tool-result");
		assert.equal(refusal(input({ ...v, firstKeptEntryId: "zzzz9999" }, path, id)), "cut-off-branch");
		const early = path[Math.floor(path.length / 2)].id;
		assert.equal(refusal(input({ ...v, leafId: early, firstKeptEntryId: path[path.length - 1].id }, path, id)), "cut-after-leaf");
	});

	test("refuses a cut before the previous compaction's kept boundary", () => {
		const sm = session(6);
		const prep = prepareCompaction(branchOf(sm), settings(2000));
		assert.ok(prep);
		sm.appendCompaction("Earlier summary", prep.firstKeptEntryId, prep.tokensBefore, computeFileLists(prep.fileOps), false);
		turn(sm, 70);
		const path = branchOf(sm);
		const v = valueFromPi(path, sm.getSessionId(), 2000);
		const first = path.find((e) => e.type === "message" && e.message.role === "user");
		assert.ok(first);
		assert.equal(refusal(input({ ...v, firstKeptEntryId: first.id, summarizedEntryIds: [] }, path, sm.getSessionId())), "cut-before-boundary");
	});

	test("refuses what would not fit under Pi's threshold, accepts exactly at it", () => {
		const sm = session(6);
		const path = branchOf(sm);
		const id = sm.getSessionId();
		const v = valueFromPi(path, id, 2000);
		const r = checkPrepared(input(v, path, id));
		assert.ok(r.ok);
		const need = r.summaryTokens + r.keptTokens;
		assert.ok(checkPrepared(input(v, path, id, { contextWindow: need + 16384 })).ok, "equal to the threshold fits");
		assert.equal(refusal(input(v, path, id, { contextWindow: need + 16383 })), "too-big");
		// a summary estimate larger than Pi's own count is honoured
		assert.equal(refusal(input({ ...v, summaryTokensEstimate: need }, path, id, { contextWindow: need + 16384 })), "too-big");
		assert.equal(refusal(input(v, path, id, { contextWindow: undefined })), "no-window");
	});

	test("refuses malformed values and values of another session", () => {
		const sm = session(4);
		const path = branchOf(sm);
		const id = sm.getSessionId();
		const v = valueFromPi(path, id, 1000);
		const bad: unknown[] = [
			null,
			"text",
			[],
			{ ...v, v: 2 },
			{ ...v, summary: "" },
			{ ...v, leafId: 7 },
			{ ...v, summarizedEntryIds: "a,b" },
			{ ...v, previousCompactionId: undefined },
			// the classic bug: file lists nested one level too deep
			{ ...v, details: { details: v.details } },
			{ ...v, details: { readFiles: [1], modifiedFiles: [] } },
		];
		for (const b of bad) assert.equal(refusal(input(b, path, id)), "malformed", JSON.stringify(b)?.slice(0, 80));
		assert.equal(refusal(input({ ...v, sessionId: "other" }, path, id)), "other-session");
		assert.equal(refusal(input({ ...v, store: "elsewhere" }, path, id)), "other-session");
		// A value made by the rules of another Pi release (the agent was upgraded since).
		assert.equal(refusal(input({ ...v, piVersion: "1.0.3" }, path, id, { piVersion: "1.6.0" })), "pi-version");
		assert.ok(checkPrepared(input({ ...v, piVersion: "1.6.0" }, path, id, { piVersion: "1.6.0" })).ok);
		assert.ok(checkPrepared(input(v, path, id, { piVersion: "1.6.0" })).ok, "a value without piVersion (compactor before 0.3) is taken");
		assert.equal(refusal(input({ ...v, piVersion: 7 }, path, id)), "malformed");
		const r = checkPrepared(input({ ...v, details: { ...v.details, extra: 1 } }, path, id));
		assert.ok(r.ok);
		assert.deepEqual(Object.keys(r.compaction.details), ["readFiles", "modifiedFiles"]);
	});
});

describe("checkPrepared on Pi 1.x's projection", { skip: project ? false : `Pi ${PI_LIB_VERSION} has no context edits or projection` }, () => {
	test("an entry a context edit omits is not summarized; a value that lists it is refused", () => {
		const sm = session(6);
		// Omit the first tool result of the span, as Pi does for an auto-retried attempt.
		const path0 = branchOf(sm);
		const tr = path0.find((e) => e.type === "message" && e.message.role === "toolResult");
		assert.ok(tr);
		sm.appendContextEdit(tr.id, null);
		turn(sm, 40);
		const path = branchOf(sm);
		const v = valueFromPi(path, sm.getSessionId(), 2000);
		assert.ok(!v.summarizedEntryIds.includes(tr.id), "Pi's own preparation leaves the omitted result out");
		const prep = prepareCompaction(path, settings(2000));
		assert.ok(checkPrepared(input(v, path, sm.getSessionId(), { preparation: prep })).ok);
		// the raw path's view (the omitted result summarized) is not what Pi summarizes
		const raw = [...v.summarizedEntryIds];
		const at = path.findIndex((e) => e.id === tr.id);
		const before = raw.findIndex((id) => path.findIndex((e) => e.id === id) > at);
		raw.splice(before < 0 ? raw.length : before, 0, tr.id);
		assert.equal(refusal(input({ ...v, summarizedEntryIds: raw }, path, sm.getSessionId(), { preparation: prep })), "entries-differ");
	});

	test("at Pi's own cut, the value summarizes as many messages as Pi's preparation", () => {
		const sm = session(6);
		const path = branchOf(sm);
		const v = valueFromPi(path, sm.getSessionId(), 2000);
		const prep = prepareCompaction(path, settings(2000));
		assert.ok(prep);
		assert.ok(checkPrepared(input(v, path, sm.getSessionId(), { preparation: prep })).ok);
		const fewer = { ...prep, messagesToSummarize: prep.messagesToSummarize.slice(1) };
		const r = checkPrepared(input(v, path, sm.getSessionId(), { preparation: fewer }));
		assert.ok(!r.ok && r.refusal === "entries-differ" && /Pi's own preparation summarizes/.test(r.detail), JSON.stringify(r));
		// another cut than Pi's: nothing to compare with
		assert.ok(checkPrepared(input(v, path, sm.getSessionId(), { preparation: { ...fewer, firstKeptEntryId: "elsewhere" } })).ok);
	});
});

describe("checkPrepared on the session files Pi wrote (corpus)", () => {
	// The recorded corpus, and the sessions the Pi under test wrote itself (Pi 1.6's: system
	// messages, context edits, usage entries, retain-none compactions).
	const dirs = [join(REPO_ROOT, "testdata", "corpus"), join(REPO_ROOT, "testdata", "corpus", "pi-generated"), join(REPO_ROOT, "testdata", "corpus", "pi-repo")];
	const generated = join(REPO_ROOT, "testdata", "corpus", `gen-${PI_LIB_VERSION}`);
	if (existsSync(generated)) dirs.push(generated);
	const files = dirs.flatMap((d) =>
		readdirSync(d)
			.filter((f) => f.endsWith(".jsonl"))
			.map((f) => join(d, f)),
	);

	test("Pi's own cut is accepted at every keepRecentTokens, and its context estimate matches Pi's", () => {
		const tmp = mkdtempSync(join(tmpdir(), "compactor-pi-ext-corpus-"));
		let checked = 0;
		let withPrevious = 0;
		let split = 0;
		let withSystem = 0;
		const refused = new Set<string>();
		try {
			for (const file of files) {
				for (const keep of [300, 2000, 8000, 20000]) {
					const copy = join(tmp, `${checked}-${keep}.jsonl`);
					copyFileSync(file, copy);
					let sm: ReturnType<typeof SessionManager.open>;
					try {
						sm = SessionManager.open(copy, tmp);
					} catch {
						refused.add(file); // Pi 1.x refuses a file that starts with a byte-order mark
						continue;
					}
					const path = sm.getBranch();
					const prep = prepareCompaction(path, settings(keep));
					if (!prep) continue; // ends with a compaction: Pi would not call the hook
					const v = valueFromPi(path, sm.getSessionId(), keep);
					const r = checkPrepared(input(v, path, sm.getSessionId(), { contextWindow: 100_000_000, preparation: prep }));
					assert.ok(r.ok, `${file} keep=${keep}: ${JSON.stringify(r)}`);
					const em = entryMessages?.systemMessages ? entryMessages : undefined;
					const systems = project
						? project(path).entries.flatMap((pe) => pe.messages.filter((m) => m.role === "system")).length
						: em
							? em.contextEntries(path).flatMap((e) => em.contextMessages(e).filter((m) => (m as { role?: string }).role === "system")).length
							: 0;
					sm.appendCompaction(r.compaction.summary, r.compaction.firstKeptEntryId, r.compaction.tokensBefore, r.compaction.details, true);
					const piTokens = sm.buildSessionContext().messages.reduce((s: number, m: unknown) => s + estimateTokens(m), 0);
					// Pi 1.x folds the system messages into the compaction's checkpoint: with one, its
					// size is that message's; with several (patches), the check counts them all.
					if (systems <= 1) assert.equal(r.summaryTokens + r.keptTokens + r.systemTokens, piTokens, `${file} keep=${keep}`);
					else assert.ok(r.summaryTokens + r.keptTokens + r.systemTokens >= piTokens, `${file} keep=${keep}`);
					if (systems > 0) withSystem++;
					checked++;
					if (v.previousCompactionId) withPrevious++;
					if (prep.isSplitTurn) split++;
				}
			}
		} finally {
			rmSync(tmp, { recursive: true, force: true });
		}
		assert.ok(checked >= 40, `checked ${checked} cuts`);
		assert.ok(withPrevious > 0 && split > 0, `previous compactions ${withPrevious}, split turns ${split}`);
		console.log(`corpus under Pi ${PI_LIB_VERSION}: ${checked} cuts, ${withPrevious} on a previous compaction, ${split} split turns, ${withSystem} with system messages; ${refused.size} file(s) Pi refuses to open`);
		assert.ok(refused.size <= 1, `Pi refused ${[...refused].join(", ")}`);
	});
});

describe("what Pi does with the details of a compaction the hook made (a fact of Pi 0.73.1)", () => {
	test("Pi carries file lists forward from its own compactions only, not from fromHook ones", () => {
		const lists = { readFiles: ["docs/only-in-the-earlier-compaction.md"], modifiedFiles: ["src/only-in-the-earlier-compaction.ts"] };
		const seen: Record<string, string[]> = {};
		for (const fromHook of [false, true]) {
			const sm = session(5);
			const prep = prepareCompaction(branchOf(sm), settings(2000));
			assert.ok(prep);
			sm.appendCompaction("Earlier summary", prep.firstKeptEntryId, prep.tokensBefore, lists, fromHook);
			for (let i = 0; i < 5; i++) turn(sm, 80 + i);
			const next = prepareCompaction(branchOf(sm), settings(2000));
			assert.ok(next);
			const files = computeFileLists(next.fileOps);
			seen[String(fromHook)] = [...files.readFiles, ...files.modifiedFiles];
		}
		assert.ok(seen.false.includes("docs/only-in-the-earlier-compaction.md") && seen.false.includes("src/only-in-the-earlier-compaction.ts"));
		assert.ok(!seen.true.some((f) => f.includes("only-in-the-earlier-compaction")), "fromHook details are not carried forward by Pi");
	});
});
