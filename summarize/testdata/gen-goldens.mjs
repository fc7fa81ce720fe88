#!/usr/bin/env node
// Regenerates the golden files of package summarize from the REAL Pi library.
//
// It is not run by `make test` (which must not need node). Run it by hand after the
// corpus or the Pi version changes:
//
//   PI_VERSION=0.73.1 interop/pi/pi exec summarize/testdata/gen-goldens.mjs
//
// Inputs:  testdata/corpus/*.jsonl[.gz] (corpus copies) and the edge-case sessions this
//          script writes itself (testdata/corpus/edge-*.jsonl, deterministic).
// Outputs: testdata/golden/<Pi version>/NAME.json with, per session file:
//   context:  the ids of buildSessionContext's messages and serializeConversation(convertToLlm(...))
//   cuts:     prepareCompaction at several leaves and keepRecentTokens values: ids summarized,
//             ids of the turn prefix, the previous compaction, both serializations, fileOps,
//             computeFileLists and formatFileOperations
//   branches: collectEntriesForBranchSummary + prepareBranchEntries for many (from, to, budget)
// Long texts are stored as {len, sha256} (len in UTF-16 units) to keep the files small.
import { createHash } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { gunzipSync } from "node:zlib";

const here = dirname(fileURLToPath(import.meta.url));
// The harness (interop/pi/pi exec) sets PI_HARNESS_ROOT; its lib/pi.mjs imports the selected Pi.
const pi = await import(pathToFileURL(join(process.env.PI_HARNESS_ROOT, "lib", "pi.mjs")).href);
const utils = await import(new URL("./core/compaction/utils.js", pi.entryUrl).href);

const corpusDir = join(here, "corpus");
const goldenDir = join(here, "golden", pi.PI_VERSION);
const INLINE_MAX = 4000; // longer texts are checked by length and hash only

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
	writeFileSync(file, `${lines.join("\n")}\n`);
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

function loadFile(file) {
	if (!file.endsWith(".gz")) return { sm: pi.loadSession(file).sm, name: file.split("/").pop().replace(/\.jsonl$/, "") };
	const dir = mkdtempSync(join(tmpdir(), "gen-goldens-"));
	const base = file.split("/").pop().replace(/\.gz$/, "");
	const plain = join(dir, base);
	writeFileSync(plain, gunzipSync(readFileSync(file)));
	try {
		return { sm: pi.loadSession(plain).sm, name: base.replace(/\.jsonl$/, "") };
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
}

// Which path entry each context message came from: message entries by identity, the
// synthesized ones by type and timestamp (in order).
function contextIds(messages, path) {
	const byMsg = new Map(path.filter((e) => e.type === "message").map((e) => [e.message, e.id]));
	const kind = { compactionSummary: "compaction", branchSummary: "branch_summary", custom: "custom_message" };
	let from = 0;
	return messages.map((m) => {
		if (byMsg.has(m)) return byMsg.get(m);
		const want = kind[m.role];
		for (let i = 0; i < path.length; i++) {
			const e = path[(from + i) % path.length];
			if (e.type === want && Date.parse(e.timestamp) === m.timestamp && (m.summary === undefined || m.summary === e.summary)) {
				from = (from + i + 1) % path.length;
				return e.id;
			}
		}
		throw new Error(`cannot map context message ${m.role}`);
	});
}

const fromEntries = (e) => e.type === "message" || e.type === "custom_message" || e.type === "branch_summary";

function cutGolden(sm, leafId, keep) {
	sm.branch(leafId);
	const path = sm.getBranch();
	const prep = pi.prepareCompaction(path, { ...pi.DEFAULT_COMPACTION_SETTINGS, keepRecentTokens: keep });
	const out = { leafId, keepRecentTokens: keep, prepared: prep !== undefined };
	if (!prep) return out;
	let prev = -1;
	for (let i = path.length - 1; i >= 0; i--)
		if (path[i].type === "compaction") {
			prev = i;
			break;
		}
	let start = 0;
	if (prev >= 0) {
		const k = path.findIndex((e) => e.id === path[prev].firstKeptEntryId);
		start = k >= 0 ? k : prev + 1;
	}
	const cut = pi.findCutPoint(path, start, path.length, keep);
	const histEnd = prep.isSplitTurn ? cut.turnStartIndex : cut.firstKeptEntryIndex;
	const ids = (from, to) => path.slice(from, to).filter(fromEntries).map((e) => e.id);
	const hist = ids(start, histEnd);
	const prefix = prep.isSplitTurn ? ids(cut.turnStartIndex, cut.firstKeptEntryIndex) : [];
	if (hist.length !== prep.messagesToSummarize.length || prefix.length !== prep.turnPrefixMessages.length)
		throw new Error(`internal: id mapping mismatch for ${leafId}/${keep}`);
	const lists = pi.computeFileLists(prep.fileOps);
	return {
		...out,
		firstKeptEntryId: prep.firstKeptEntryId,
		isSplitTurn: prep.isSplitTurn,
		previousCompactionId: prev >= 0 ? path[prev].id : null,
		previousSummary: prep.previousSummary ?? null,
		messagesToSummarize: hist,
		turnPrefix: prefix,
		serializedHistory: serialize(prep.messagesToSummarize),
		serializedPrefix: serialize(prep.turnPrefixMessages),
		fileOps: {
			read: [...prep.fileOps.read],
			written: [...prep.fileOps.written],
			edited: [...prep.fileOps.edited],
			readFiles: lists.readFiles,
			modifiedFiles: lists.modifiedFiles,
		},
		formatted: utils.formatFileOperations(lists.readFiles, lists.modifiedFiles),
	};
}

const yieldsBranch = (e) =>
	(e.type === "message" && e.message.role !== "toolResult") || ["custom_message", "branch_summary", "compaction"].includes(e.type);

function branchGolden(sm, fromId, toId, budget) {
	const { entries, commonAncestorId } = pi.collectEntriesForBranchSummary(sm, fromId, toId);
	const prep = pi.prepareBranchEntries(entries, budget);
	const cands = entries.filter(yieldsBranch);
	const used = cands.slice(cands.length - prep.messages.length);
	const lists = pi.computeFileLists(prep.fileOps);
	return {
		fromId,
		toId,
		tokenBudget: budget,
		commonAncestorId,
		entries: entries.map((e) => e.id),
		messages: used.map((e) => e.id),
		totalTokens: prep.totalTokens,
		serialized: serialize(prep.messages),
		fileOps: {
			read: [...prep.fileOps.read],
			written: [...prep.fileOps.written],
			edited: [...prep.fileOps.edited],
			readFiles: lists.readFiles,
			modifiedFiles: lists.modifiedFiles,
		},
	};
}

const files = readdirSync(corpusDir)
	.filter((f) => /\.jsonl(\.gz)?$/.test(f))
	.sort();
for (const f of files) {
	const { sm, name } = loadFile(join(corpusDir, f));
	const leaf = sm.getLeafId();
	const entries = sm.getEntries();
	const small = entries.length <= 80;
	texts = {};
	const golden = { file: f, piVersion: pi.PI_VERSION, leafId: leaf };

	const path = sm.getBranch();
	const ctx = pi.buildSessionContext(path);
	golden.context = { ids: contextIds(ctx.messages, path), serialized: serialize(ctx.messages) };

	// cuts: the file's leaf with several budgets; for small files every entry as leaf
	const leaves = small ? entries.map((e) => e.id) : [leaf];
	const keeps = small ? [0, 100, 1000, 5000, 20000] : [1000, 5000, 20000];
	golden.cuts = [];
	for (const l of leaves) for (const k of keeps) golden.cuts.push(cutGolden(sm, l, k));
	sm.branch(leaf);

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
	writeFileSync(join(goldenDir, `${name}.json`), `${JSON.stringify(golden)}\n`);
	console.log(`${name}: ${golden.cuts.length} cuts, ${golden.branches.length} branches`);
}
