// interop/pi/pi selftest: the harness's own checks against the selected Pi; one line per
// check ("ok" or "FAIL" and why), then "selftest: N passed, M failed" (exit 1 on a failure).
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { branchReport } from "./lib/branch.mjs";
import { contextReport } from "./lib/context.mjs";
import { cutReport } from "./lib/cut.mjs";
import { entryUrl, HarnessError, internals, PI_VERSION, PROJECTED } from "./lib/pi.mjs";

// The checks below state facts about Pi's releases (docs/compatibility.md): since(v) is true
// from release v on.
const num = (v) => v.split(/[.-]/).slice(0, 3).map(Number);
const since = (v) => {
	const [a, b] = [num(PI_VERSION), num(v)];
	for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] > b[i];
	return true;
};

const here = process.env.PI_HARNESS_ROOT;
const root = resolve(here, "../..");
const corpus = join(root, "testdata/corpus");
let passed = 0;
let failed = 0;
async function check(name, fn) {
	try {
		const why = await fn();
		if (why) throw new Error(why);
		passed++;
		console.log(`ok   ${name}`);
	} catch (err) {
		failed++;
		console.log(`FAIL ${name}: ${err.message}`);
	}
}
const context = async (file, ...a) => (await contextReport([file, ...a])).result;
const cut = async (file, ...a) => (await cutReport([file, ...a])).result;
const exitOf = async (fn) => {
	try {
		await fn();
		return 0;
	} catch (err) {
		if (err instanceof HarnessError) return err.exitCode;
		throw err;
	}
};
const sha = (f) => createHash("sha256").update(readFileSync(f)).digest("hex");
// The generated corpus of this Pi: the committed one, or (a version outside the matrix) one
// generated now into a temp dir.
const committedGen = join(corpus, `gen-${PI_VERSION}`);
const committed = existsSync(committedGen);
const gen = committed ? committedGen : mkdtempSync(join(tmpdir(), "compactor-selftest-gen-"));
if (!committed) {
	const r = spawnSync(process.execPath, [join(here, "gen.mjs"), "--out", gen, "--compact"], { encoding: "utf8" });
	if (r.status !== 0) console.log(`FAIL gen into ${gen}: ${r.stderr}`);
	process.on("exit", () => rmSync(gen, { recursive: true, force: true }));
}

await check("the internal modules' functions are the package entry's own objects", async () => {
	const entry = await import(entryUrl);
	const differ = Object.entries(internals).filter(([n, mod]) => n in entry && entry[n] !== mod[n]);
	const missing = Object.entries(internals).filter(([n, mod]) => mod[n] === undefined);
	if (missing.length) return `not in the internal modules: ${missing.map(([n]) => n).join(", ")}`;
	if (differ.length) return `differ from the entry's: ${differ.map(([n]) => n).join(", ")}`;
});

await check("the CLI runs and says its version", () => {
	const r = spawnSync(join(here, "pi"), ["cli", "--version"], { encoding: "utf8", env: { ...process.env, PI_VERSION } });
	if (r.status !== 0 || !`${r.stdout}${r.stderr}`.includes(PI_VERSION)) return `exit ${r.status}: ${r.stdout} ${r.stderr}`;
});

for (const [f, code] of [["empty", 2], ["no-header", 2], ["not-json", 2]])
	await check(`bad/${f}.jsonl: exit ${code} (Pi cannot load it)`, async () => {
		const got = await exitOf(() => context(join(corpus, "bad", `${f}.jsonl`)));
		if (got !== code) return `exit ${got}`;
	});
await check("bad/: malformed line 3, a duplicate id and an orphan, a migrated v1 file are reported", async () => {
	const m = await context(join(corpus, "bad/malformed-line.jsonl"));
	const o = await context(join(corpus, "bad/orphan-and-dup.jsonl"));
	const v = await context(join(corpus, "bad/legacy-v1.jsonl"));
	if (JSON.stringify(m.diagnostics.malformedLines) !== "[3]") return `malformed ${JSON.stringify(m.diagnostics)}`;
	if (!o.diagnostics.duplicateIds?.length || !o.diagnostics.orphanIds?.length) return `orphan-and-dup ${JSON.stringify(o.diagnostics)}`;
	if (v.diagnostics.migratedFromVersion !== 1) return `legacy ${JSON.stringify(v.diagnostics)}`;
});
await check("a migrated v1 file gives the same ids on every run (seeded)", async () => {
	const a = await context(join(corpus, "pi-repo/large-session.jsonl"));
	const b = await context(join(corpus, "pi-repo/large-session.jsonl"));
	if (JSON.stringify(a.pathIds) !== JSON.stringify(b.pathIds)) return "pathIds differ between runs";
});
await check("a byte-order mark: loaded with a warning before 0.78.1, refused (exit 2) from 0.78.1", async () => {
	const f = join(gen, "x-bom-c01-chat-s.jsonl");
	if (!existsSync(f)) return `${f} missing: run interop/pi/pi gen`;
	if (since("0.78.1")) return (await exitOf(() => context(f))) === 2 ? undefined : "loaded";
	const r = await context(f);
	if (!r.diagnostics.bom) return "no bom diagnostic";
});
await check("the input file is never modified (a file without its final newline, which Pi repairs on load from 0.84.4)", async () => {
	const f = join(gen, "x-no-final-newline-c01-chat-s.jsonl");
	const before = sha(f);
	const r = await context(f);
	await cut(f);
	if (sha(f) !== before) return "the file changed";
	if (!r.diagnostics.missingFinalNewline) return "no diagnostic";
});

await check("10-tricky-parallel at keep 20000: the split turn as documented", async () => {
	const r = await cut(join(corpus, "10-tricky-parallel.jsonl"));
	const got = [r.firstKeptEntryId, r.isSplitTurn, r.turnStartEntryId, r.messagesToSummarize.join(","), r.turnPrefix.join(","), r.tokensBefore].join(" ");
	const want = "aaaa000a true aaaa0005 aaaa0003,aaaa0004 aaaa0005,aaaa0006,aaaa0007,aaaa0008,aaaa0009 31120";
	if (got !== want) return `got ${got}, want ${want}`;
});
await check("12-tricky-custom-message-cut: a cut at a custom message is a split turn with an empty prefix before 0.80.4, no split from 0.80.4", async () => {
	const r = await cut(join(corpus, "12-tricky-custom-message-cut.jsonl"));
	if (r.isSplitTurn === since("0.80.4")) return `isSplitTurn ${r.isSplitTurn}`;
	if (!since("0.80.4") && (r.turnPrefix.length !== 0 || r.turnStartIndex !== r.firstKeptEntryIndex)) return `turnPrefix ${r.turnPrefix} turnStart ${r.turnStartIndex}`;
});

await check("every corpus file's cut at 20000/5000/1000 maps back to entries (ordered, summarized before kept)", async () => {
	const files = [];
	for (const d of [".", "pi-generated", "pi-repo", `gen-${PI_VERSION}`]) {
		const dir = join(corpus, d);
		if (existsSync(dir)) for (const f of readdirSync(dir)) if (f.endsWith(".jsonl") && !f.startsWith("x-bom")) files.push(join(dir, f));
	}
	let plans = 0;
	for (const f of files)
		for (const k of ["20000", "5000", "1000"]) {
			const r = await cut(f, "--keep-recent-tokens", k);
			if (!r.prepared) continue;
			plans++;
			const ctx = await context(f);
			const pos = new Map(ctx.pathIds.map((id, i) => [id, i]));
			const idx = [...r.messagesToSummarize, ...r.turnPrefix].map((id) => pos.get(id));
			if (idx.some((i) => i === undefined)) return `${f} @${k}: an id off the path`;
			if (idx.some((i, n) => n > 0 && i <= idx[n - 1])) return `${f} @${k}: ids out of order`;
			if (idx.length && idx[idx.length - 1] >= r.firstKeptEntryIndex) return `${f} @${k}: summarized at or after the first kept entry`;
			if (ctx.pathIds[r.firstKeptEntryIndex] !== r.firstKeptEntryId) return `${f} @${k}: firstKeptEntryIndex is not the path index of firstKeptEntryId`;
			// Before 0.80.4 Pi splits at a custom message with an empty prefix (turn start = first kept).
			const emptyPrefixOk = !since("0.80.4") && r.turnStartIndex === r.firstKeptEntryIndex && r.turnPrefix.length === 0;
			if (r.isSplitTurn !== (r.turnStartIndex >= 0) || (r.isSplitTurn && r.turnPrefix[0] !== r.turnStartEntryId && !emptyPrefixOk))
				return `${f} @${k}: turn start ${r.turnStartEntryId} vs prefix ${r.turnPrefix[0]}`;
		}
	if (plans < 20) return `only ${plans} plans`;
});

await check("per-model compaction settings: modelOverrides apply from 0.86, not before", async () => {
	const r = await cut(join(corpus, "01-minimal.jsonl"), "--settings", join(root, "testdata/pi-settings/model-overrides.json"));
	const want = since("0.86.0") ? 3000 : 20000;
	if (r.model !== "anthropic/claude-sonnet-4-5" || r.settings.keepRecentTokens !== want) return `model ${r.model} keep ${r.settings.keepRecentTokens}, want ${want}`;
});

await check("a branch summary goes to the target with fromId = its parent (before 0.84.3) or the leaf it left (from 0.84.3)", async () => {
	const f = join(corpus, "03-branches-labels-name.jsonl");
	const { result: r } = await branchReport([f, "--to", "ef5834c6"]);
	const want = since("0.84.3") ? r.oldLeafId : r.newLeafId;
	if (r.summaryEntry?.parentId !== r.newLeafId || r.summaryEntry.fromId !== want) return JSON.stringify(r.summaryEntry);
	if (!r.messages.length) return "nothing summarized";
});

if (PROJECTED) {
	await check("context edits: the omitted tool result is gone, the replaced user message has the new text, the errored attempt is gone", async () => {
		const f = join(gen, "n02-context-edits-s.jsonl");
		const r = await context(f, "--entries");
		const edits = r.pathEntries.filter((e) => e.type === "context_edit");
		const latest = new Map(edits.map((e) => [e.targetId, e]));
		for (const [target, e] of latest) {
			const at = r.messageEntryIds.indexOf(target);
			if (e.replacement === null && at >= 0) return `omitted ${target} is in context`;
			if (e.replacement !== null) {
				const m = r.context.messages[at];
				const text = typeof m.content === "string" ? m.content : m.content.map((b) => b.text ?? "").join("");
				const want = typeof e.replacement.content === "string" ? e.replacement.content : e.replacement.content.map((b) => b.text ?? "").join("");
				if (text !== want) return `${target} keeps its old text`;
			}
		}
		if (edits.length < 6) return `only ${edits.length} edits`;
	});
	await check("a compaction with a system checkpoint: context starts system, compactionSummary; no kept system message", async () => {
		const r = await context(join(gen, "n05-compaction-system-checkpoint-m.jsonl"));
		const roles = r.context.messages.map((m) => m.role);
		if (roles[0] !== "system" || roles[1] !== "compactionSummary") return roles.slice(0, 3).join(",");
		if (roles.slice(2).includes("system") && r.messageEntryIds.slice(2).some((id, i) => roles[i + 2] === "system" && r.pathIds.indexOf(id) < r.pathIds.indexOf(r.messageEntryIds[1])))
			return "a system message kept from before the compaction";
	});
	await check("a retain-none compaction stores its own id as firstKeptEntryId", async () => {
		const r = await context(join(gen, "n04-retain-none-s.jsonl"), "--entries");
		const c = r.pathEntries.find((e) => e.type === "compaction");
		if (!c || c.firstKeptEntryId !== c.id) return JSON.stringify(c && { id: c.id, firstKeptEntryId: c.firstKeptEntryId });
	});
}

await check(`gen is deterministic and gives the ${committed ? "committed" : "same"} bytes (c01-chat, n02 where written)`, async () => {
	const tmp = mkdtempSync(join(tmpdir(), "compactor-selftest-"));
	try {
		const r = spawnSync(process.execPath, [join(here, "gen.mjs"), "--out", tmp, "c01-chat", "n02"], { encoding: "utf8" });
		if (r.status !== 0) return r.stderr;
		for (const f of readdirSync(tmp)) {
			if (!existsSync(join(gen, f))) return `${f} is not in ${gen}`;
			if (sha(join(tmp, f)) !== sha(join(gen, f))) return `${f}: other bytes than ${join(gen, f)}`;
		}
	} finally {
		rmSync(tmp, { recursive: true, force: true });
	}
});

console.log(`selftest of the harness against Pi ${PI_VERSION}`);
console.log(`selftest: ${passed} passed, ${failed} failed`);
process.exitCode = failed ? 1 : 0;

