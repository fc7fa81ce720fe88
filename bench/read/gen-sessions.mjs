#!/usr/bin/env node
// gen-sessions.mjs writes the large sessions `make bench-read` measures, with the real Pi's
// SessionManager doing every write (so the bytes on disk are Pi's own), Pi's own
// prepareCompaction choosing each compaction's first kept entry, and Pi's estimateTokens
// driving auto-compaction as Pi would (context > window - reserveTokens). Summaries and all
// other content are made up here; no LLM is called. Output is deterministic (seeded PRNG for
// content and entry ids, a virtual clock for timestamps): re-running gives the same bytes.
//
//   node bench/read/gen-sessions.mjs --pi PI_PACKAGE_DIR --out DIR SPEC...
//
// SPEC is one of
//   large            a ~7.5 MiB coding session: many tool calls, long outputs, images,
//                    unicode, model and thinking changes, a /tree branch with a summary,
//                    labels, a name, auto-compactions (file large.jsonl)
//   history:N        a long-lived session compacted N times (history-N.jsonl), on a 400k
//                    window with screenshots; the turns after the last compaction are the
//                    same whatever N. N=20 is ~100 MiB.
//                    Also writes live-N.jsonl: the same live context with no history (the
//                    path's latest thinking_level_change and model_change, then the entries
//                    from the latest compaction's first kept entry to the leaf), so that
//                    `compactor context` must print the same context for both files.
//
// PI_PACKAGE_DIR is what `interop/pi/pi where` prints (…/node_modules/@scope/pi-coding-agent); run it
// through `interop/pi/pi exec` so that the node matches the Pi.
import crypto from "node:crypto";
import { appendFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { deflateSync } from "node:zlib";

const argv = process.argv.slice(2);
const opt = (name) => {
	const i = argv.indexOf(name);
	return i >= 0 ? argv[i + 1] : undefined;
};
const piDir = opt("--pi");
const outDir = resolve(opt("--out") ?? ".");
const specs = argv.filter((a, i) => !a.startsWith("--") && !argv[i - 1]?.startsWith("--"));
if (!piDir || specs.length === 0) {
	console.error("usage: node gen-sessions.mjs --pi PI_PACKAGE_DIR --out DIR large|history:N ...");
	process.exit(64);
}
const piModule = (p) => import(pathToFileURL(join(piDir, "dist", p)).href);
const { SessionManager, buildSessionContext } = await piModule("core/session-manager.js");
const { prepareCompaction, estimateTokens } = await piModule("core/compaction/compaction.js");
const { computeFileLists } = await piModule("core/compaction/utils.js");

// ---------------------------------------------------------------------------
// Determinism: a seeded generator (splitmix32), Pi's ids (randomUUID) drawn from it, and a
// clock that only moves when the script says so.
let seed = 1;
function rnd() {
	seed = (seed + 0x9e3779b9) >>> 0;
	let z = seed;
	z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
	z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
	return ((z ^ (z >>> 16)) >>> 0) / 2 ** 32;
}
const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));
const one = (xs) => xs[Math.floor(rnd() * xs.length)];
const chance = (p) => rnd() < p;
const hexChars = (n) => {
	let s = "";
	for (let i = 0; i < n; i++) s += "0123456789abcdef"[int(0, 15)];
	return s;
};
const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const b64Chars = (n) => {
	let s = "";
	for (let i = 0; i < n; i++) s += B64[int(0, 63)];
	return s;
};
crypto.randomUUID = () => `${hexChars(8)}-${hexChars(4)}-4${hexChars(3)}-a${hexChars(3)}-${hexChars(12)}`;
syncBuiltinESMExports();

const NativeDate = Date;
let now = NativeDate.parse("2026-03-02T08:00:00.000Z");
globalThis.Date = class extends NativeDate {
	constructor(...a) {
		if (a.length === 0) super(now);
		else super(...a);
	}
	static now() {
		return now;
	}
};
const wait = (ms) => {
	now += Math.max(1, Math.round(ms * (0.5 + rnd())));
};

// ---------------------------------------------------------------------------
// Content. Unicode on purpose: accents, CJK, Cyrillic, Greek, emoji (astral, so UTF-16
// surrogate pairs), right-to-left text; and the escapes JSON needs (quotes, tabs, newlines).
const NOUNS = ["ledger", "cursor", "shard", "replica", "budget", "tenant", "invoice", "session", "snapshot", "webhook", "queue", "lease", "token", "bucket", "span"];
const VERBS = ["reconciles", "flushes", "retries", "rejects", "batches", "rotates", "compacts", "streams", "validates", "throttles"];
const INTL = [
	"die Überprüfung schlägt fehl", "ça marche déjà", "más rápido que antes", "日本語のログ出力", "数据库连接超时", "ошибка сериализации",
	"η σύνδεση έκλεισε", "تم رفض الطلب", "커밋이 실패했습니다", "naïve café résumé", "🚀 deploy done", "✅ 12 passed", "⚠️ flaky", "🐛 fixed 👍",
];
const MODS = ["billing", "ingest", "auth", "search", "export", "scheduler", "gateway", "metrics"];
const ident = () => one(NOUNS) + one(NOUNS).replace(/^./, (c) => c.toUpperCase());
const sentence = () => `The ${one(NOUNS)} ${one(VERBS)} the ${one(NOUNS)}${chance(0.3) ? ` (${one(INTL)})` : ""} when the ${one(NOUNS)} ${one(VERBS)}.`;
const prose = (n) => Array.from({ length: n }, sentence).join(" ");
const srcFile = () => `src/${one(MODS)}/${one(NOUNS)}_${one(NOUNS)}.go`;

function codeLine(depth) {
	const pad = "\t".repeat(depth);
	switch (int(0, 7)) {
		case 0:
			return `${pad}${ident()}, err := s.${ident()}(ctx, "${one(NOUNS)}", ${int(1, 900)})`;
		case 1:
			return `${pad}if err != nil {\n${pad}\treturn fmt.Errorf("${one(NOUNS)} ${one(VERBS)}: %w", err)\n${pad}}`;
		case 2:
			return `${pad}// ${one(["TODO", "NOTE", "XXX"])}: ${sentence()}`;
		case 3:
			return `${pad}log.Info("${one(INTL)}", "${one(NOUNS)}", ${ident()}.ID, "took", time.Since(start))`;
		case 4:
			return `${pad}for _, ${one(NOUNS)} := range ${ident()} {`;
		case 5:
			return `${pad}${ident()}[${ident()}.Key] = append(${ident()}[${ident()}.Key], "${one(NOUNS)}\\t${one(NOUNS)}")`;
		case 6:
			return `${pad}}`;
		default:
			return `${pad}return &${ident()}{Name: "${one(NOUNS)}", Limit: ${int(1, 64)}}, nil`;
	}
}
function sourceText(lines) {
	const out = [`package ${one(MODS)}`, "", `import (\n\t"context"\n\t"fmt"\n)`, ""];
	while (out.length < lines) {
		out.push(`func (s *${ident()}) ${ident()}(ctx context.Context, ${one(NOUNS)} string) error {`);
		for (let i = int(3, 14); i > 0; i--) out.push(codeLine(1));
		out.push("}", "");
	}
	return out.slice(0, lines).join("\n");
}
function testLog(files, fail) {
	const out = [];
	for (let i = 0; i < files; i++) {
		const bad = fail && i === files - 1;
		out.push(`${bad ? "--- FAIL" : "ok  "}\texample.com/app/${one(MODS)}/${one(NOUNS)}\t${(int(4, 3000) / 1000).toFixed(3)}s`);
		if (bad) out.push(`    ${one(NOUNS)}_test.go:${int(10, 300)}: got "${one(INTL)}", want "${one(NOUNS)}"`, "FAIL");
	}
	return out.join("\n");
}
const logLines = (n) => Array.from({ length: n }, (_, i) => `2026-03-02T08:${String(i % 60).padStart(2, "0")}:${String(int(0, 59)).padStart(2, "0")}Z level=${one(["info", "warn", "error"])} msg="${one(INTL)}" ${one(NOUNS)}=${hexChars(8)} dur=${int(1, 999)}ms`).join("\n");

// A real PNG (decodable) of w x h, noisy enough not to compress to nothing.
const crcTable = new Uint32Array(256).map((_, n) => {
	let c = n;
	for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
	return c >>> 0;
});
function crc(buf) {
	let c = 0xffffffff;
	for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
	return (c ^ 0xffffffff) >>> 0;
}
function chunk(type, data) {
	const head = Buffer.alloc(8);
	head.writeUInt32BE(data.length, 0);
	head.write(type, 4, "ascii");
	const tail = Buffer.alloc(4);
	tail.writeUInt32BE(crc(Buffer.concat([head.subarray(4), data])), 0);
	return Buffer.concat([head, data, tail]);
}
function png(w, h) {
	const rows = Buffer.alloc((w * 3 + 1) * h);
	for (let y = 0; y < h; y++)
		for (let x = 0; x < w; x++) {
			const o = y * (w * 3 + 1) + 1 + x * 3;
			rows[o] = (x * 7 + int(0, 90)) & 255;
			rows[o + 1] = (y * 5 + int(0, 90)) & 255;
			rows[o + 2] = int(0, 255);
		}
	const ihdr = Buffer.alloc(13);
	ihdr.writeUInt32BE(w, 0);
	ihdr.writeUInt32BE(h, 4);
	ihdr[8] = 8;
	ihdr[9] = 2;
	const sig = Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]);
	return Buffer.concat([sig, chunk("IHDR", ihdr), chunk("IDAT", deflateSync(rows)), chunk("IEND", Buffer.alloc(0))]).toString("base64");
}

// ---------------------------------------------------------------------------
// An agent session on top of Pi's SessionManager.
const MODELS = {
	"sonnet-4-5": { api: "anthropic-messages", provider: "anthropic", id: "claude-sonnet-4-5", window: 200000 },
	"sonnet-4-6": { api: "anthropic-messages", provider: "anthropic", id: "claude-sonnet-4-6", window: 1000000 },
	"gpt-5.1-codex": { api: "openai-responses", provider: "openai", id: "gpt-5.1-codex", window: 400000 },
};
const RESERVE = 16384;
const KEEP = 20000;
const PROMPT_TOKENS = 6200; // system prompt + tool schemas, in every request

class Agent {
	constructor(model, thinking) {
		this.dir = mkdtempSync(join(tmpdir(), "bench-gen-"));
		this.sm = SessionManager.create("/home/dev/app", this.dir);
		this.sm.newSession({ id: `019c${hexChars(4)}-${hexChars(4)}-7${hexChars(3)}-8${hexChars(3)}-${hexChars(12)}` });
		this.tokens = 0; // Pi's estimate of the current context
		this.model = MODELS[model];
		this.sm.appendModelChange(this.model.provider, this.model.id);
		this.thinking = thinking;
		this.sm.appendThinkingLevelChange(thinking);
	}
	add(message) {
		this.tokens += estimateTokens(message);
		return this.sm.appendMessage(message);
	}
	switchModel(name) {
		wait(3000);
		this.model = MODELS[name];
		this.sm.appendModelChange(this.model.provider, this.model.id);
	}
	setThinking(level) {
		wait(1000);
		this.thinking = level;
		this.sm.appendThinkingLevelChange(level);
	}
	user(text, images = []) {
		wait(int(5000, 90000));
		return this.add({ role: "user", content: [{ type: "text", text }, ...images], timestamp: Date.now() });
	}
	assistant({ text, calls = [], stop }) {
		wait(int(800, 4000));
		const content = [];
		if (this.thinking !== "off") {
			const sig = this.model.api === "openai-responses" ? JSON.stringify({ type: "reasoning", id: `rs_${hexChars(40)}`, encrypted_content: b64Chars(int(300, 900)) }) : `Eu${b64Chars(int(200, 600))}==`;
			content.push({ type: "thinking", thinking: prose(int(1, 4)), thinkingSignature: sig });
		}
		if (text) content.push({ type: "text", text });
		const toolCalls = calls.map((c) => ({ type: "toolCall", id: this.model.api === "openai-responses" ? `call_${b64Chars(20).replace(/[+/]/g, "x")}|fc_${hexChars(40)}` : `toolu_01${b64Chars(22).replace(/[+/]/g, "y")}`, name: c.name, arguments: c.args }));
		content.push(...toolCalls);
		const ctx = PROMPT_TOKENS + this.tokens;
		const output = int(40, 900);
		const failed = stop === "error" || stop === "aborted";
		const usage = { input: failed ? 0 : int(2, 20), output: failed ? 0 : output, cacheRead: failed ? 0 : Math.max(0, ctx - 4000), cacheWrite: failed ? 0 : 4000, totalTokens: 0, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } };
		usage.totalTokens = usage.input + usage.output + usage.cacheRead + usage.cacheWrite;
		usage.cost.output = (usage.output * 15) / 1e6;
		usage.cost.cacheRead = (usage.cacheRead * 0.3) / 1e6;
		usage.cost.cacheWrite = (usage.cacheWrite * 3.75) / 1e6;
		usage.cost.total = usage.cost.output + usage.cost.cacheRead + usage.cost.cacheWrite;
		const msg = { role: "assistant", content, api: this.model.api, provider: this.model.provider, model: this.model.id, usage, stopReason: stop ?? (toolCalls.length ? "toolUse" : "stop"), timestamp: Date.now() };
		if (stop === "error") msg.errorMessage = 'overloaded_error: {"type":"error","error":{"type":"overloaded_error"}}';
		if (stop === "aborted") msg.errorMessage = "Request was aborted";
		wait(output * 12);
		return { id: this.add(msg), calls: toolCalls };
	}
	result(call, text, { images = [], isError = false, details } = {}) {
		wait(int(20, 4000));
		return this.add({ role: "toolResult", toolCallId: call.id, toolName: call.name, content: [{ type: "text", text }, ...images], details, isError, timestamp: Date.now() });
	}
	// One user turn: 1..rounds tool rounds of 1-3 parallel calls, then an answer.
	turn(rounds, imageRate) {
		const start = this.user(`${prose(int(1, 3))}${chance(0.2) ? `\n\n\`\`\`\n${sourceText(int(5, 25))}\n\`\`\`` : ""}`, chance(imageRate) ? [{ type: "image", data: png(int(120, 260), int(80, 180)), mimeType: "image/png" }] : []);
		for (let r = int(1, rounds); r > 0; r--) {
			const tools = Array.from({ length: int(1, 3) }, () => this.tool(imageRate));
			const a = this.assistant({ text: chance(0.4) ? prose(1) : undefined, calls: tools.map((t) => t.call) });
			a.calls.forEach((c, i) => tools[i].answer(c));
		}
		this.assistant({ text: `${prose(int(1, 5))}\n\n- ${prose(1)}\n- ${prose(1)}` });
		return start;
	}
	tool(imageRate) {
		const k = int(0, 11);
		if (k < 3) {
			const path = srcFile();
			const lines = int(20, 260);
			return { call: { name: "read", args: { path } }, answer: (c) => this.result(c, sourceText(lines)) };
		}
		if (k < 4 && chance(imageRate * 4)) {
			const path = `docs/screens/${one(NOUNS)}.png`;
			return { call: { name: "read", args: { path } }, answer: (c) => this.result(c, "Read image file [image/png]", { images: [{ type: "image", data: png(int(200, 420), int(150, 300)), mimeType: "image/png" }] }) };
		}
		if (k < 6) return { call: { name: "bash", args: { command: "go test ./...", timeout: 600 } }, answer: (c) => this.result(c, testLog(int(5, 30), chance(0.3))) };
		if (k < 7) return { call: { name: "bash", args: { command: `tail -n 800 /var/log/${one(MODS)}.log` } }, answer: (c) => this.result(c, logLines(int(40, 300)), { details: { truncation: { truncated: chance(0.5), totalLines: int(800, 90000) } } }) };
		if (k < 8) return { call: { name: "grep", args: { pattern: ident(), path: "src" } }, answer: (c) => this.result(c, Array.from({ length: int(3, 60) }, () => `${srcFile()}:${int(1, 900)}:${codeLine(0)}`).join("\n")) };
		if (k < 10) {
			const path = srcFile();
			return {
				call: { name: "edit", args: { path, edits: [{ oldText: codeLine(1), newText: `${codeLine(1)}\n${codeLine(1)}` }] } },
				answer: (c) => (chance(0.15) ? this.result(c, `Could not find the exact text in ${path}.`, { isError: true }) : this.result(c, `Successfully replaced 1 block(s) in ${path}.`, { details: { diff: `--- a/${path}\n+++ b/${path}\n@@ -1,3 +1,4 @@\n-${codeLine(1)}\n+${codeLine(1)}\n+${codeLine(1)}`, firstChangedLine: int(1, 400) } })),
			};
		}
		const path = srcFile();
		const body = sourceText(int(20, 200));
		return { call: { name: "write", args: { path, content: body } }, answer: (c) => this.result(c, `Successfully wrote ${body.length} bytes to ${path}`) };
	}
	overBudget() {
		return PROMPT_TOKENS + this.tokens > this.model.window - RESERVE;
	}
	// Compaction as Pi's auto-compaction does it: prepareCompaction on the branch, a summary
	// (made up), appendCompaction; the estimate restarts from the new context.
	compact() {
		const prep = prepareCompaction(this.sm.getBranch(), { enabled: true, reserveTokens: RESERVE, keepRecentTokens: KEEP });
		if (!prep) throw new Error("nothing to compact");
		const { readFiles, modifiedFiles } = computeFileLists(prep.fileOps);
		let summary = `## Goal\n${prose(2)}\n\n## Progress\n### Done\n- [x] ${prose(1)}\n- [x] ${prose(1)}\n\n### In Progress\n- [ ] ${prose(1)}\n\n## Key Decisions\n- ${prose(2)}\n\n## Next Steps\n1. ${prose(1)}`;
		if (prep.isSplitTurn) summary += `\n\n---\n\n**Turn Context (split turn):**\n\n${prose(2)}`;
		if (readFiles.length) summary += `\n\n<read-files>\n${readFiles.join("\n")}\n</read-files>`;
		if (modifiedFiles.length) summary += `\n\n<modified-files>\n${modifiedFiles.join("\n")}\n</modified-files>`;
		wait(30000);
		const id = this.sm.appendCompaction(summary, prep.firstKeptEntryId, prep.tokensBefore, { readFiles, modifiedFiles }, false);
		this.tokens = buildSessionContext(this.sm.getEntries(), this.sm.getLeafId()).messages.reduce((t, m) => t + estimateTokens(m), 0);
		return id;
	}
	file() {
		const files = readdirSync(this.dir).filter((f) => f.endsWith(".jsonl"));
		if (files.length !== 1) throw new Error(`expected one session file in ${this.dir}, found ${files.length}`);
		return join(this.dir, files[0]);
	}
	finish(dest) {
		renameSync(this.file(), dest);
		rmSync(this.dir, { recursive: true, force: true });
		return dest;
	}
	size() {
		try {
			return statSync(this.file()).size;
		} catch {
			return 0;
		}
	}
}

// ---------------------------------------------------------------------------
function genLarge() {
	seed = 7507;
	const a = new Agent("sonnet-4-5", "medium");
	a.sm.appendSessionInfo("Migración del ledger 📒 → v2");
	const target = 7.5 * 1024 * 1024;
	let turns = 0;
	let anchor = null;
	let abandoned = null;
	while (a.size() < target) {
		turns++;
		if (turns === 40) a.setThinking("high");
		if (turns === 60) anchor = a.sm.getLeafId();
		if (turns === 75) abandoned = a.sm.getLeafId();
		if (turns === 76) {
			// /tree back to the anchor with a summary of the abandoned branch, then a label on it.
			wait(20000);
			const bs = a.sm.branchWithSummary(anchor, `## Goal\n${prose(1)}\n\n## Abandoned\n${prose(3)}`, { readFiles: [srcFile()], modifiedFiles: [] }, false);
			a.sm.appendLabelChange(bs, "abandoned: cursor rewrite ✂️");
			a.tokens = buildSessionContext(a.sm.getEntries(), a.sm.getLeafId()).messages.reduce((t, m) => t + estimateTokens(m), 0);
		}
		if (turns === 90) a.switchModel("gpt-5.1-codex");
		if (turns === 120) a.switchModel("sonnet-4-6");
		if (turns === 130) a.setThinking("low");
		if (turns % 17 === 0) a.sm.appendCustomEntry("bench-marker", { turn: turns, note: one(INTL) });
		if (turns % 23 === 0) a.sm.appendCustomMessageEntry("reminder", `Reminder: ${prose(1)}`, true, { turn: turns });
		const start = a.turn(4, 0.04);
		if (turns % 29 === 0) a.sm.appendLabelChange(start, `turn ${turns} ${one(["🔖", "checkpoint", "größer"])}`);
		if (turns === 100) {
			a.user(prose(1));
			a.assistant({ text: "Partial answ", stop: "aborted" });
			a.user(prose(1));
			a.assistant({ stop: "error" });
		}
		if (a.overBudget()) a.compact();
	}
	if (abandoned) a.sm.appendLabelChange(abandoned, "dead end");
	a.sm.appendSessionInfo("Migración del ledger 📒 → v2 (done)");
	return a.finish(join(outDir, "large.jsonl"));
}

// The turns after the last compaction come from a fixed seed, so the live context has the
// same shape for every N (same new turns; the kept part before the compaction and the
// timestamps follow the history).
function genHistory(n) {
	seed = 20000 + n;
	const a = new Agent("gpt-5.1-codex", "medium");
	a.sm.appendSessionInfo(`Long-lived worker session (${n} compactions)`);
	for (let c = 0; c < n - 1; c++) {
		while (!a.overBudget()) a.turn(5, 0.1);
		a.compact();
	}
	if (n > 0) {
		while (!a.overBudget()) a.turn(5, 0.1);
		a.compact();
	}
	seed = 424242;
	// The live context after the last compaction: about a third of the window.
	while (PROMPT_TOKENS + a.tokens < a.model.window / 3) a.turn(5, 0.1);
	const dest = a.finish(join(outDir, `history-${n}.jsonl`));
	writeLive(dest, join(outDir, `live-${n}.jsonl`));
	return dest;
}

// writeLive writes the live-only twin of a session: header, the latest thinking_level_change
// and model_change on the leaf's path, then the path from the latest compaction's first kept
// entry to the leaf; only parentIds of the first three entries change (re-chained), lines
// are serialized as Pi serializes them (JSON.stringify).
function writeLive(src, dest) {
	const sm = SessionManager.open(src, mkdtempSync(join(tmpdir(), "bench-live-")));
	const path = sm.getBranch();
	let comp = -1;
	for (let i = path.length - 1; i >= 0 && comp < 0; i--) if (path[i].type === "compaction") comp = i;
	const first = comp < 0 ? 0 : path.findIndex((e) => e.id === path[comp].firstKeptEntryId);
	const head = JSON.parse(readFileSync(src, "utf8").split("\n", 1)[0]);
	const last = (type) => path.slice(0, first).findLast((e) => e.type === type);
	const pre = [last("thinking_level_change"), last("model_change")].filter(Boolean);
	const lines = [head];
	let parent = null;
	for (const e of [...pre, ...path.slice(first)]) {
		lines.push({ ...e, parentId: parent }); // a no-op after the first kept entry: the path is already chained
		parent = e.id;
	}
	writeFileSync(dest, "");
	for (const l of lines) appendFileSync(dest, `${JSON.stringify(l)}\n`);
}

mkdirSync(outDir, { recursive: true });
for (const spec of specs) {
	const t0 = NativeDate.now();
	let file;
	if (spec === "large") file = genLarge();
	else if (/^history:\d+$/.test(spec)) file = genHistory(Number(spec.split(":")[1]));
	else throw new Error(`unknown spec ${spec}`);
	console.error(`${file}: ${(statSync(file).size / 1048576).toFixed(1)} MiB in ${((NativeDate.now() - t0) / 1000).toFixed(1)} s`);
}
