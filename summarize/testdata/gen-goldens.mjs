#!/usr/bin/env node
// Regenerates the golden files of package summarize from the REAL Pi, one Pi version at a
// time, through the project's harness (interop/pi: its context report, and the mapping of Pi's
// plans and branch messages back to entries that its cut and branch reports use, exact or
// refused):
//
//   PI_VERSION=0.73.1 interop/pi/pi exec summarize/testdata/gen-goldens.mjs [--check]
//   PI_VERSION=1.6.0  interop/pi/pi exec summarize/testdata/gen-goldens.mjs [--check]
//
// `make goldens` runs it for every Pi of the matrix, `make interop` with --check (rewrites
// nothing: compares every golden and edge session with what the live Pi gives, byte for
// byte; ends with "N passed, M failed", exit 1 on a failure). `make test` does not need node.
//
// Inputs:  testdata/corpus/*.jsonl[.gz] (corpus copies), the edge-case sessions this script
//          writes itself (testdata/corpus/edge-*.jsonl, deterministic; edge-pi1-* only for
//          Pi >= 1.x, which knows system messages, context edits and usage entries), and the
//          repository's generated corpus of that Pi (../../testdata/corpus/gen-<version>/,
//          written by Pi's own SessionManager; not the x-* byte edits, which test loaders).
// Outputs: testdata/golden/<Pi version>/NAME.json with, per session file:
//   context:  the entry ids of buildSessionContext's messages and serializeConversation(convertToLlm(...))
//   cuts:     prepareCompaction at several leaves and keepRecentTokens values: ids summarized,
//             ids of the turn prefix, the previous compaction, both serializations, fileOps,
//             computeFileLists and formatFileOperations
//   branches: collectEntriesForBranchSummary + prepareBranchEntries for many (from, to, budget)
// Long texts are stored as {len, sha256} (len in UTF-16 units) to keep the files small.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { gunzipSync } from "node:zlib";

const here = dirname(fileURLToPath(import.meta.url));
// The harness (interop/pi/pi exec) sets PI_HARNESS_ROOT; its lib/pi.mjs imports the selected Pi.
const lib = (m) => import(pathToFileURL(join(process.env.PI_HARNESS_ROOT, "lib", m)).href);
const pi = await lib("pi.mjs");
const { contextReport } = await lib("context.mjs");
const { planEntries } = await lib("cut.mjs");
const { mapBranchMessages } = await lib("branch.mjs");
const { goldenStore, previousPinned } = await lib("store.mjs");
const utils = await import(new URL("./core/compaction/utils.js", pi.entryUrl).href);

const check = process.argv.includes("--check");
const corpusDir = join(here, "corpus");
const genDir = join(here, "..", "..", "testdata", "corpus", `gen-${pi.PI_VERSION}`);
const goldenDir = join(here, "golden", pi.PI_VERSION);
// The goldens go into a golden store (interop/pi/lib/store.mjs): a golden the same as the
// pinned release before it (interop/pi/versions.txt) is not stored again.
const store = goldenStore(join(here, "golden"), pi.PI_VERSION, { check, prev: previousPinned(process.env.PI_HARNESS_ROOT, pi.PI_VERSION) });
const INLINE_MAX = 4000; // longer texts are checked by length and hash only

// --check compares instead of writing; every output goes through emit().
let passed = 0;
let failed = 0;
function emit(file, text) {
	if (!check) {
		mkdirSync(dirname(file), { recursive: true });
		writeFileSync(file, text);
		return;
	}
	const have = existsSync(file) ? readFileSync(file, "utf8") : null;
	if (have === text) passed++;
	else {
		failed++;
		console.log(`FAIL ${relative(join(here, "..", ".."), file)}: ${have === null ? "missing" : "differs from the live Pi"} (regenerate: PI_VERSION=${pi.PI_VERSION} interop/pi/pi exec summarize/testdata/gen-goldens.mjs)`);
	}
}

// ---------------------------------------------------------------- edge-case sessions
function edgeSession(name, build) {
	const lines = [];
	let n = 0;
	let clock = Date.parse("2026-01-02T03:04:05.000Z");
	let leaf = null;
	const ts = () => new Date((clock += 1000)).toISOString();
	const api = {
		header: () =>
			lines.push(JSON.stringify({ type: "session", version: 3, id: `0196aaaa-0000-7000-8000-${name.padStart(12, "0").slice(-12)}`, timestamp: ts(), cwd: "/tmp/edge" })),
		// add(obj, {parent, raw}) appends an entry with type,id,parentId,timestamp + payload
		add(type, payload, opts = {}) {
			const id = `e${(++n).toString(16).padStart(7, "0")}`;
			const parentId = opts.parent !== undefined ? opts.parent : leaf;
			let line = JSON.stringify({ type, id, parentId, timestamp: ts(), ...payload });
			if (opts.rewrite) line = opts.rewrite(line);
			lines.push(line);
			leaf = id;
			return id;
		},
		msg(message, opts) {
			return api.add("message", { message: { ...message, timestamp: clock } }, opts);
		},
		user: (content, opts) => api.msg({ role: "user", content }, opts),
		assistant: (content, extra = {}, opts) =>
			api.msg(
				{
					role: "assistant",
					content,
					api: "openai-completions",
					provider: "openai",
					model: "gpt-test",
					usage: { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, totalTokens: 15, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
					stopReason: "stop",
					...extra,
				},
				opts,
			),
		result: (toolCallId, toolName, content, isError = false, opts) =>
			api.msg({ role: "toolResult", toolCallId, toolName, content, isError }, opts),
		bash: (fields, opts) => api.msg({ role: "bashExecution", ...fields }, opts),
		setLeaf: (id) => {
			leaf = id;
		},
		get leaf() {
			return leaf;
		},
	};
	api.header();
	build(api);
	const file = join(corpusDir, `edge-${name}.jsonl`);
	emit(file, `${lines.join("\n")}\n`);
	return file;
}

const text = (t) => ({ type: "text", text: t });
const image = { type: "image", data: "aGVsbG8=", mimeType: "image/png" };
const call = (id, name, args) => ({ type: "toolCall", id, name, arguments: args });

// Serialization corner cases: truncation around surrogate pairs, images, bash variants,
// custom messages, argument key order and JSON.stringify of values, empty parts.
edgeSession("serialize", (s) => {
	s.add("model_change", { provider: "openai", modelId: "gpt-test" });
	s.user([text("Please refactor the "), image, text("parser. Keep the API stable.")]);
	s.assistant([
		{ type: "thinking", thinking: "first thought", thinkingSignature: "x" },
		text("Looking."),
		{ type: "thinking", thinking: "second thought" },
		text("Second text."),
		call("c1", "read", { path: "src/ü.go" }),
		call("c2", "bash", { command: "ls -la", timeout: 30 }),
		call("c3", "custom_tool", {
			b: 1,
			a: "x",
			10: true,
			2: null,
			4294967295: "not an index",
			4294967294: "max index",
			"01": "leading zero",
			"-1": "negative",
			nested: { z: 1, 1: [1.5, 1e21, 1e-7, -0, 0.1, 123456789012345680000] },
			s: 'line\nbreak \u2028 <tag> & "q" \\ \t\u0001\u007f',
			lone: "\ud800x",
			emoji: "😀",
		}),
		call("c4", "read", { path: "" }),
		call("c5", "write", { path: "out/new.txt", content: "hello" }),
		call("c6", "edit", { path: "src/ü.go", edits: [{ oldText: "a", newText: "b" }] }),
		call("c7", "read", { path: 42 }),
		call("c8", "noargs", {}),
	]);
	s.result("c1", "read", [text("a".repeat(1999)), text("😀 tail after the pair"), image]);
	s.result("c2", "bash", [text("Error: ENOENT: no such file")], true);
	s.result("c3", "custom_tool", [image]);
	s.result("c5", "write", [text("b".repeat(2000))]);
	s.result("c6", "edit", [text("c".repeat(2001))]);
	s.result("c7", "read", [text("😀".repeat(1500))]);
	s.bash({ command: "make", output: "", exitCode: 1, cancelled: false, truncated: false });
	s.bash({ command: "sleep 100", output: "partial", cancelled: true, truncated: false });
	s.bash({ command: "cat big", output: "x\n", exitCode: 2, cancelled: false, truncated: true, fullOutputPath: "/tmp/out.txt" });
	s.bash({ command: "secret", output: "hidden", exitCode: 0, cancelled: false, truncated: false, excludeFromContext: true });
	s.bash({ command: "nullcode", output: "y", exitCode: null, cancelled: false, truncated: true });
	s.bash({ command: "float", output: "z", exitCode: 1.5, cancelled: false, truncated: false });
	s.add("custom_message", { customType: "ext", content: [text("from "), image, text("extension")], display: true });
	s.add("custom_message", { customType: "ext", content: "", display: false });
	s.add("custom", { customType: "state", data: { n: 1 } });
	s.msg({ role: "custom", customType: "legacy", content: "legacy hook message", display: true });
	s.user("");
	s.user([image]);
	s.user("plain string content with \ud800 lone surrogate");
	s.assistant([], { stopReason: "error", errorMessage: "boom" });
	s.assistant([text("")]);
	s.assistant([call("c9", "read", { path: "dup-first.txt" })], {}, {
		rewrite: (l) => l.replace('{"path":"dup-first.txt"}', '{"path":"dup-first.txt","other":1,"path":"dup-last.txt"}'),
	});
	s.result("c9", "read", [text("dup")]);
	s.msg({ role: "unknownRole", content: "ignored" });
	s.add("branch_summary", { fromId: s.leaf, summary: "explored X", details: { readFiles: ["bs-read.txt"], modifiedFiles: ["bs-mod.txt"] }, fromHook: false });
	s.add("branch_summary", { fromId: s.leaf, summary: "", details: { readFiles: ["bs-empty.txt"], modifiedFiles: [] }, fromHook: false });
	s.add("branch_summary", { fromId: s.leaf, summary: "from hook", details: { readFiles: ["hook.txt"], modifiedFiles: ["hook-mod.txt"] }, fromHook: true });
	s.user("final request: ship it");
	s.assistant([text("Done. Shipped.")]);
});

// File lists: UTF-16 sort order, lone surrogates, previous compaction seeding (fromHook
// false/true/absent, details missing or odd), branch file ops from earlier summaries.
edgeSession("fileops", (s) => {
	s.add("model_change", { provider: "openai", modelId: "gpt-test" });
	const u1 = s.user("read a lot of files");
	s.assistant([
		call("r1", "read", { path: "Zeta.txt" }),
		call("r2", "read", { path: "alpha.txt" }),
		call("r3", "read", { path: "é.txt" }),
		call("r4", "read", { path: "😀.txt" }),
		call("r5", "read", { path: "\uffff.txt" }),
		call("r6", "read", { path: "\udc00lone.txt" }),
		call("r7", "read", { path: "B.txt" }),
		call("r8", "edit", { path: "alpha.txt", edits: [] }),
	]);
	for (const id of ["r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"]) s.result(id, "read", [text(`content of ${id} `.repeat(40))]);
	s.assistant([text("Read them all. ".repeat(30))]);
	const keep1 = s.user("now edit");
	s.assistant([call("w1", "write", { path: "new/file.go", content: "package x" }), call("w2", "edit", { path: "Zeta.txt", edits: [] })]);
	s.result("w1", "write", [text("ok")]);
	s.result("w2", "edit", [text("ok")]);
	s.add("compaction", { summary: "first summary", firstKeptEntryId: keep1, tokensBefore: 1234, details: { readFiles: ["prev-read.txt", "Zeta.txt"], modifiedFiles: ["prev-mod.txt"] }, fromHook: false });
	s.user("after first compaction");
	s.assistant([call("x1", "read", { path: "prev-mod.txt" }), text("checking " + "y".repeat(400))]);
	s.result("x1", "read", [text("z".repeat(500))]);
	const keep2 = s.user("more work");
	s.assistant([text("w".repeat(800))]);
	s.add("compaction", { summary: "hook summary", firstKeptEntryId: keep2, tokensBefore: 99, details: { readFiles: ["hook-read.txt"], modifiedFiles: [] }, fromHook: true });
	s.user("after hook compaction");
	s.assistant([call("y1", "read", { path: "after-hook.txt" }), text("v".repeat(600))]);
	s.result("y1", "read", [text("q".repeat(300))]);
	s.add("compaction", { summary: "no details", firstKeptEntryId: "missing-id", tokensBefore: 5 });
	s.user("after compaction without details or fromHook");
	s.assistant([call("y2", "write", { path: "late.txt", content: "" }), text("u".repeat(700))]);
	s.result("y2", "write", [text("ok")]);
	s.add("compaction", { summary: "odd details", firstKeptEntryId: s.leaf, tokensBefore: 5, details: { readFiles: "not-an-array", modifiedFiles: ["odd-mod.txt"] } });
	s.user("tail");
	s.assistant([text("t".repeat(900))]);
	// a side branch off the first user message, with its own summaries, for branch goldens
	s.setLeaf(u1);
	s.assistant([call("b1", "read", { path: "side.txt" }), text("side work " + "s".repeat(300))]);
	s.result("b1", "read", [text("side")]);
	s.add("branch_summary", { fromId: s.leaf, summary: "side summary", details: { readFiles: ["side-prev.txt"], modifiedFiles: ["side-mod.txt"] }, fromHook: false });
	s.add("compaction", { summary: "side compaction " + "c".repeat(2000), firstKeptEntryId: u1, tokensBefore: 7, details: { readFiles: ["never-used.txt"], modifiedFiles: [] }, fromHook: false });
	s.user("side question " + "q".repeat(1200));
	s.assistant([call("b2", "edit", { path: "side.txt", edits: [] }), text("side answer " + "a".repeat(1500))]);
	s.result("b2", "edit", [text("ok")]);
	s.add("label", { targetId: u1, label: "start" });
});

// Pi >= 1.x only (edge-pi1-*): what 1.x added to a session and changed in summaries. System
// messages (full, patches, null content and tools), context edits (omit, replace with a
// string or blocks, superseded, on a custom message, a branch summary and a system message,
// on entries of a side branch only), usage entries, a compaction carrying a systemMessage
// checkpoint, thinking (1.x no longer serializes it), tool results with codemode nestedCalls
// (file lists) and with string content, and cuts at 2000 UTF-16 units inside a surrogate pair
// or after a lone high surrogate (1.x's sliceHead keeps pairs whole).
edgeSession("pi1-corners", (s) => {
	s.add("model_change", { provider: "openai", modelId: "gpt-test" });
	s.msg({
		role: "system",
		content: "You are a test agent.",
		sections: { env: "<env>\ncwd: /tmp/edge\n</env>", notes: "", gone: null },
		toolsAdded: [{ name: "read", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } } } }],
	});
	const u1 = s.user([text("start: read things "), image, text("and run a script")]);
	const a1 = s.assistant([
		{ type: "thinking", thinking: "private reasoning that 1.x leaves out", thinkingSignature: "sig" },
		text("Reading."),
		call("p1", "read", { path: "a.txt" }),
		call("p2", "codemode", { script: "await read('nested-read.txt')" }),
		call("p3", "bash", { command: "echo hi" }),
	]);
	s.result("p1", "read", [text(`${"a".repeat(1999)}😀 and a tail after the pair`)]);
	s.msg({
		role: "toolResult",
		toolCallId: "p2",
		toolName: "codemode",
		content: [text("script done")],
		isError: false,
		nestedCalls: {
			calls: [
				{ name: "read", arguments: { path: "nested-read.txt" } },
				{ name: "write", arguments: { path: "nested-write.txt", content: "x" } },
				{ name: "edit", arguments: { path: "nested-edit.txt", edits: [] } },
				{ name: "read", arguments: { path: "a.txt" } },
				{ name: "bash", arguments: { command: "ls" } },
				{ name: "read", arguments: { path: "" } },
				{ name: "read", arguments: { path: 7 } },
				{ name: "read", arguments: {} },
				{ name: "read" },
				{ arguments: { path: "no-name.txt" } },
				{ name: "write", arguments: { path: "nested-write.txt", path2: "dup" } },
			],
		},
	});
	const r3 = s.result("p3", "bash", "plain string output of a tool");
	s.add("usage", {
		kind: "cache_warm",
		provider: "openai",
		model: "gpt-test",
		usage: { input: 1, output: 1, cacheRead: 100, cacheWrite: 0, totalTokens: 102, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
	});
	s.assistant([{ type: "thinking", thinking: "only thinking here" }]);
	s.assistant([{ type: "thinking", thinking: "thinking then empty text" }, text("")]);
	const u2 = s.user("second request: the big outputs");
	s.assistant([call("q1", "read", { path: "big.txt" }), call("q2", "read", { path: "lone.txt" }), call("q3", "read", { path: "str.txt" })]);
	s.result("q1", "read", [text("b".repeat(1000)), text(`${"c".repeat(999)}😀😀 tail`)]);
	s.result("q2", "read", [text(`${"d".repeat(1999)}\ud800${"e".repeat(50)}`)]);
	s.result("q3", "read", `${"f".repeat(1999)}😀 string content cut inside the pair`);
	s.msg({ role: "system", content: "", sections: { notes: "patched notes" }, toolsAdded: null });
	const c1 = s.add("custom_message", { customType: "ext", content: "custom before its edit", display: true });
	const a2 = s.assistant([text("Edited soon."), call("w1", "write", { path: "w.txt", content: "1" }), call("w2", "edit", { path: "e.txt", edits: [] })]);
	s.result("w1", "write", [text("ok")]);
	s.result("w2", "edit", [text("ok")]);
	const sys2 = s.msg({ role: "system", content: "", sections: { env: "<env>\ncwd: /tmp/other\n</env>" }, toolsRemoved: [{ name: "read" }] });
	const bs = s.add("branch_summary", { fromId: u2, summary: "a summary an edit cannot change", details: { readFiles: ["bs.txt"], modifiedFiles: [] }, fromHook: false });
	// omitted from the context, still summarized with the branch (Pi edits messages and custom messages there)
	const bs2 = s.add("branch_summary", { fromId: u2, summary: "a summary a null edit omits", details: { readFiles: ["bs2.txt"], modifiedFiles: [] }, fromHook: false });
	s.add("context_edit", { targetId: r3, replacement: null });
	s.add("context_edit", { targetId: a1, replacement: { content: "assistant replaced by a string (its tool calls are gone)" } });
	s.add("context_edit", { targetId: u1, replacement: { content: [text("user replaced "), image, text("with blocks")] } });
	s.add("context_edit", { targetId: c1, replacement: { content: [text("custom replaced")] } });
	s.add("context_edit", { targetId: a2, replacement: { content: [text("first replacement")] } });
	s.add("context_edit", { targetId: a2, replacement: null });
	s.add("context_edit", { targetId: bs, replacement: { content: "ignored for a branch summary" } });
	s.add("context_edit", { targetId: bs2, replacement: null });
	s.add("context_edit", { targetId: sys2, replacement: null });
	const u3 = s.user("third request");
	s.assistant([text("Third answer. ".repeat(40)), call("t1", "read", { path: "t.txt" })]);
	s.result("t1", "read", [text("t".repeat(700))]);
	s.add("compaction", {
		summary: "summary of the first three requests",
		firstKeptEntryId: u3,
		tokensBefore: 4321,
		details: { readFiles: ["prev-read.txt"], modifiedFiles: ["prev-mod.txt"] },
		fromHook: false,
		systemMessage: { role: "system", content: "You are a test agent (checkpoint).", sections: { env: "<env>\ncwd: /tmp/other\n</env>" }, toolsAdded: [{ name: "write" }] },
	});
	const u4 = s.user("after the compaction");
	const a4 = s.assistant([text("Working after it."), call("x1", "edit", { path: "late.txt", edits: [] })]);
	s.result("x1", "edit", [text("ok")]);
	s.add("context_edit", { targetId: a4, replacement: { content: [text("late answer replaced"), call("x9", "read", { path: "from-replacement.txt" })] } });
	s.user("last request");
	s.assistant([text("Done.")]);
	// a side branch from u2 with its own edits: honoured when it is summarized, not elsewhere
	s.setLeaf(u2);
	const sa = s.assistant([text("side answer"), call("s1", "read", { path: "side.txt" })]);
	s.result("s1", "read", [text("side result")]);
	const sc = s.add("custom_message", { customType: "ext", content: [text("side custom")], display: false });
	s.add("context_edit", { targetId: sa, replacement: { content: [text("side answer replaced")] } });
	s.add("context_edit", { targetId: sc, replacement: null });
	s.add("context_edit", { targetId: u4, replacement: null }); // a target on the other branch
	s.user("side question");
});

// ---------------------------------------------------------------- golden generation
const sha = (s) => createHash("sha256").update(Buffer.from(s, "utf8")).digest("hex");
// Serialized texts are stored once per file in golden.texts (sha256 -> text) when short.
let texts = {};
const textGolden = (s) => {
	const h = sha(s);
	if (s.length <= INLINE_MAX) texts[h] = s;
	return { len: s.length, sha256: h };
};
const serialize = (msgs) => textGolden(utils.serializeConversation(pi.convertToLlm(msgs)));

// The session files of this Pi, [golden name, file, path recorded in the golden (relative to
// testdata/corpus)].
function inputs() {
	const out = [];
	for (const f of readdirSync(corpusDir).sort()) {
		if (!/\.jsonl(\.gz)?$/.test(f)) continue;
		if (f.startsWith("edge-pi1-") && !pi.PROJECTED) continue; // entry types Pi 0.73 does not know
		out.push([f.replace(/\.jsonl(\.gz)?$/, ""), join(corpusDir, f), f]);
	}
	if (existsSync(genDir))
		for (const f of readdirSync(genDir).sort())
			if (f.endsWith(".jsonl") && !f.startsWith("x-")) out.push([`gen-${pi.PI_VERSION}-${f.slice(0, -6)}`, join(genDir, f), relative(corpusDir, join(genDir, f))]);
	return out;
}

// Pi reads files; a .gz copy is unpacked into a temp dir for it.
function plainFile(file, tmp) {
	if (!file.endsWith(".gz")) return file;
	const plain = join(tmp, file.split("/").pop().replace(/\.gz$/, ""));
	writeFileSync(plain, gunzipSync(readFileSync(file)));
	return plain;
}

const report = async (run, argv) => (await run(argv)).result;
const fileOpsGolden = (fileOps) => {
	const lists = pi.computeFileLists(fileOps);
	return { read: [...fileOps.read], written: [...fileOps.written], edited: [...fileOps.edited], readFiles: lists.readFiles, modifiedFiles: lists.modifiedFiles };
};

// prepareCompaction at leafId with keepRecentTokens keep (what `interop/pi/pi cut --leaf ID
// --keep-recent-tokens N --messages` prints, without loading the file again).
function cutGolden(sm, leafId, keep) {
	pi.applyLeaf(sm, leafId);
	const path = sm.getBranch();
	const settings = pi.compactionSettings({ keepRecentTokens: keep });
	const prep = pi.prepareCompaction(path, settings);
	const out = { leafId, keepRecentTokens: keep, prepared: prep !== undefined };
	if (!prep) return out;
	const plan = planEntries(prep, path, settings);
	const fileOps = fileOpsGolden(prep.fileOps);
	return {
		...out,
		firstKeptEntryId: prep.firstKeptEntryId,
		isSplitTurn: prep.isSplitTurn,
		previousCompactionId: plan.previousCompactionId,
		previousSummary: prep.previousSummary ?? null,
		messagesToSummarize: plan.messagesToSummarize,
		turnPrefix: plan.turnPrefix,
		serializedHistory: serialize(prep.messagesToSummarize),
		serializedPrefix: serialize(prep.turnPrefixMessages),
		fileOps,
		formatted: utils.formatFileOperations(fileOps.readFiles, fileOps.modifiedFiles),
	};
}

// collectEntriesForBranchSummary + prepareBranchEntries (`interop/pi/pi branch --messages`
// without the summary entry it places).
function branchGolden(sm, fromId, toId, budget) {
	const { entries, commonAncestorId } = pi.collectEntriesForBranchSummary(sm, fromId, toId);
	const prep = pi.prepareBranchEntries(entries, budget);
	return {
		fromId,
		toId,
		tokenBudget: budget,
		commonAncestorId,
		entries: entries.map((e) => e.id),
		messages: mapBranchMessages(entries, prep.messages),
		totalTokens: prep.totalTokens,
		serialized: serialize(prep.messages),
		fileOps: fileOpsGolden(prep.fileOps),
	};
}

const want = new Set();
const tmp = mkdtempSync(join(tmpdir(), "gen-goldens-"));
try {
	for (const [name, source, recorded] of inputs()) {
		const file = plainFile(source, tmp);
		const { sm } = pi.loadSession(file);
		const leaf = sm.getLeafId();
		const entries = sm.getEntries();
		// every leaf and branch of small files; of the generated corpus, the small size (-s)
		const small = entries.length <= 80 && !(source.startsWith(genDir) && !name.endsWith("-s"));
		texts = {};
		const golden = { file: recorded, piVersion: pi.PI_VERSION, leafId: leaf };

		const ctx = await report(contextReport, [file]);
		golden.context = { ids: ctx.messageEntryIds, serialized: serialize(ctx.context.messages) };

		// cuts: the file's leaf with several budgets; for small files every entry as leaf
		const leaves = small ? entries.map((e) => e.id) : [leaf];
		const keeps = small ? [0, 100, 1000, 5000, 20000] : [1000, 5000, 20000];
		golden.cuts = [];
		for (const l of leaves) for (const k of keeps) golden.cuts.push(cutGolden(sm, l, k));
		pi.applyLeaf(sm, leaf);

		// branches: from the leaf (and from every other tip in small files) to every entry
		golden.branches = [];
		if (small) {
			const hasChild = new Set(entries.map((e) => e.parentId).filter(Boolean));
			const tips = [leaf, ...entries.filter((e) => !hasChild.has(e.id) && e.id !== leaf).map((e) => e.id)];
			for (const from of tips)
				for (const e of entries)
					for (const budget of [0, 60, 500, 3000]) {
						if (e.id === from) continue;
						golden.branches.push(branchGolden(sm, from, e.id, budget));
					}
		}
		golden.texts = texts;
		want.add(`${name}.json`);
		store.put(`${name}.json`, `${JSON.stringify(golden)}\n`);
		if (!check) console.log(`${pi.PI_VERSION}/${name}: ${golden.cuts.length} cuts, ${golden.branches.length} branches`);
	}
} finally {
	rmSync(tmp, { recursive: true, force: true });
}
{
	const r = store.finish();
	passed += r.passed;
	failed += r.failed;
	for (const l of r.lines) console.log(`${l.replace("FAIL ", "FAIL summarize/testdata/golden/")} (regenerate: PI_VERSION=${pi.PI_VERSION} interop/pi/pi exec summarize/testdata/gen-goldens.mjs)`);
	if (!check) console.log(`Pi ${pi.PI_VERSION}: ${r.stored} of ${r.total} summarize goldens stored in ${relative(join(here, "..", ".."), goldenDir)}/, the rest the same as an earlier pinned release's`);
}
if (check) {
	console.log(`summarize goldens of Pi ${pi.PI_VERSION}: ${passed} passed, ${failed} failed`);
	if (failed) process.exitCode = 1;
}
