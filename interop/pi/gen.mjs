// interop/pi/pi gen [--out DIR] [NAME-FILTER...]
//
// Writes the generated corpus (testdata/corpus/gen-<version>/ by default) with the selected
// Pi's own SessionManager: every byte of a session file is written by Pi (appendMessage,
// appendCompaction, branchWithSummary, appendContextEdit, ...). No LLM: the messages are made
// here from a seeded generator, with usage that follows the context's size; compactions and
// branch summaries take their cut and file lists from Pi (prepareCompaction,
// collectEntriesForBranchSummary + prepareBranchEntries), only the summary text is ours.
//
// Deterministic: one seed per session drives the content, Pi's entry ids (crypto.randomUUID)
// and a virtual clock (Date), so regenerating writes the same bytes. Two files per version
// are byte edits of a Pi-written one (x-bom-*: a byte-order mark before the header,
// x-no-final-newline-*: the last newline cut), for the loaders' edge cases.
//
// Scenarios: every Pi writes the c* ones (chat, tools, bash/custom, branches, compactions,
// trailing tool results, long single turns, images), each in three sizes so that cuts at
// keep 20000 / 5000 / 1000 land in different places. Pi >= 1.x also writes the n* ones:
// system messages and their patches, context edits (omitted tool result, replaced user and
// assistant messages, a superseded edit, the null edits of an auto-retried error), usage
// entries (cache_warm), retain-none compactions and compactions that carry systemMessage.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { deflateSync } from "node:zlib";
import {
	collectEntriesForBranchSummary,
	computeFileLists,
	estimateTokens,
	HarnessError,
	PI_VERSION,
	PROJECTED,
	parseArgs,
	prepareBranchEntries,
	prepareCompaction,
	reseed,
	runMain,
	SessionManager,
	seededHex,
} from "./lib/pi.mjs";

const USAGE = "usage: interop/pi/pi gen [--out DIR] [NAME-FILTER...]";

// ---------------------------------------------------------------------------
// The deterministic world: PRNG, virtual clock
// ---------------------------------------------------------------------------
let rs = 1;
const rand = () => {
	rs = (rs + 0x9e3779b9) >>> 0; // splitmix32-like
	let z = rs;
	z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
	z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
	return ((z ^ (z >>> 16)) >>> 0) / 4294967296;
};
const int = (a, b) => a + Math.floor(rand() * (b - a + 1));
const choose = (xs) => xs[Math.floor(rand() * xs.length)];
const hashName = (s) => [...s].reduce((h, c) => (Math.imul(h, 31) + c.charCodeAt(0)) >>> 0, 7);

const RealDate = Date;
let now = 0;
globalThis.Date = class extends RealDate {
	constructor(...a) {
		if (a.length === 0) super(now);
		else super(...a);
	}
	static now() {
		return now;
	}
};
const wait = (ms) => {
	now += Math.max(1, Math.round(ms * (0.6 + 0.8 * rand())));
};

// ---------------------------------------------------------------------------
// Made-up project content
// ---------------------------------------------------------------------------
const CWD = "/home/dev/src/ledger";
const AREAS = ["accounts", "journal", "ledger", "reports", "import", "export", "auth", "rates"];
const VOCAB =
	"balance entry posting account currency rate ledger journal period close reconcile amount debit credit total report export import parser schema migration index query cache retry".split(
		" ",
	);
const w = () => choose(VOCAB);
const sentence = () => {
	const n = int(6, 16);
	const s = Array.from({ length: n }, w).join(" ");
	return `${s[0].toUpperCase()}${s.slice(1)}.`;
};
const paragraph = (n = int(2, 5)) => Array.from({ length: n }, sentence).join(" ");
const filePath = () => `src/${choose(AREAS)}/${w()}${choose(["", "_test", "_util"])}.go`;
function codeLines(n) {
	const out = [];
	for (let i = 0; i < n; i++) {
		switch (int(0, 5)) {
			case 0:
				out.push(`func ${w()}${w().toUpperCase().slice(0, 1)}${w()}(ctx context.Context, id string) error {`);
				break;
			case 1:
				out.push(`\tif err := s.${w()}(ctx, ${w()}); err != nil {\n\t\treturn fmt.Errorf("${w()} ${w()}: %w", err)\n\t}`);
				break;
			case 2:
				out.push(`\t// ${sentence()}`);
				break;
			case 3:
				out.push(`\t${w()} := ${w()}.${w()}[${int(0, 99)}] * ${int(1, 1000)}`);
				break;
			case 4:
				out.push("}");
				break;
			default:
				out.push(`\treturn ${w()}, nil`);
		}
	}
	return out.join("\n");
}
const sized = (chars) => {
	let s = "";
	while (s.length < chars) s += `${codeLines(8)}\n`;
	return s.slice(0, chars);
};

// A small real PNG (our encoder) for image blocks.
const CRC = Array.from({ length: 256 }, (_, n) => {
	let c = n;
	for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
	return c >>> 0;
});
const crc32 = (buf) => {
	let c = 0xffffffff;
	for (const b of buf) c = CRC[(c ^ b) & 0xff] ^ (c >>> 8);
	return (c ^ 0xffffffff) >>> 0;
};
function png(wd, ht) {
	const chunk = (type, data) => {
		const td = Buffer.concat([Buffer.from(type), data]);
		const len = Buffer.alloc(4);
		len.writeUInt32BE(data.length);
		const crc = Buffer.alloc(4);
		crc.writeUInt32BE(crc32(td));
		return Buffer.concat([len, td, crc]);
	};
	const rows = [];
	for (let y = 0; y < ht; y++) {
		const row = Buffer.alloc(1 + wd * 3);
		for (let x = 0; x < wd; x++) row.set([(x * 37 + int(0, 40)) & 255, (y * 53) & 255, 160 + int(0, 90)], 1 + x * 3);
		rows.push(row);
	}
	const ihdr = Buffer.alloc(13);
	ihdr.writeUInt32BE(wd, 0);
	ihdr.writeUInt32BE(ht, 4);
	ihdr.set([8, 2, 0, 0, 0], 8);
	return Buffer.concat([
		Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
		chunk("IHDR", ihdr),
		chunk("IDAT", deflateSync(Buffer.concat(rows))),
		chunk("IEND", Buffer.alloc(0)),
	]).toString("base64");
}

// ---------------------------------------------------------------------------
// A session written through Pi's SessionManager
// ---------------------------------------------------------------------------
const MODEL = { provider: "anthropic", id: "claude-sonnet-4-5", api: "anthropic-messages" };
const PRICE = { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 }; // $ per million tokens
const TOOLS = [
	{ name: "read", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } },
	{ name: "bash", description: "Run a shell command", parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } },
	{
		name: "edit",
		description: "Replace text in a file",
		parameters: { type: "object", properties: { path: { type: "string" }, oldText: { type: "string" }, newText: { type: "string" } }, required: ["path"] },
	},
	{ name: "write", description: "Write a file", parameters: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } }, required: ["path"] } },
];

class Session {
	constructor(name, dir) {
		this.name = name;
		this.dir = dir;
		rs = hashName(name);
		reseed(hashName(`${name}/ids`));
		now = RealDate.parse("2026-03-02T08:00:00.000Z") + int(0, 86_400_000);
		this.tmp = mkdtempSync(join(tmpdir(), "compactor-gen-"));
		this.sm = SessionManager.create(CWD, this.tmp);
		const ts = now.toString(16).padStart(12, "0");
		this.sm.newSession({ id: `${ts.slice(0, 8)}-${ts.slice(8)}-7${seededHex(3)}-a${seededHex(3)}-${seededHex(12)}` });
		this.sm.appendModelChange(MODEL.provider, MODEL.id);
		this.sm.appendThinkingLevelChange("medium");
		this.calls = 0;
	}
	ctxTokens() {
		return this.sm.buildSessionContext().messages.reduce((n, m) => n + estimateTokens(m), 0);
	}
	msg(m) {
		wait(400);
		return this.sm.appendMessage({ ...m, timestamp: Date.now() });
	}
	user(text, images = 0) {
		if (!images) return this.msg({ role: "user", content: text });
		const content = [{ type: "text", text }];
		for (let i = 0; i < images; i++) content.push({ type: "image", data: png(int(8, 24), int(8, 24)), mimeType: "image/png" });
		return this.msg({ role: "user", content });
	}
	usage(outputTokens) {
		const ctx = this.ctxTokens() + 2600; // + the system prompt and tool definitions
		const input = int(2, 40);
		const cacheWrite = int(0, 600);
		const cacheRead = Math.max(0, ctx - input - cacheWrite);
		const u = { input, output: outputTokens, cacheRead, cacheWrite, totalTokens: input + outputTokens + cacheRead + cacheWrite };
		const c = (n, p) => (n * p) / 1e6;
		const cost = { input: c(input, PRICE.input), output: c(outputTokens, PRICE.output), cacheRead: c(cacheRead, PRICE.cacheRead), cacheWrite: c(cacheWrite, PRICE.cacheWrite) };
		cost.total = cost.input + cost.output + cost.cacheRead + cost.cacheWrite;
		return { ...u, cost };
	}
	/** An assistant message; calls = [{name, args}] become toolCall blocks. Returns {id, callIds}. */
	assistant({ text = paragraph(), thinking = rand() < 0.5, calls = [], stopReason, errorMessage } = {}) {
		wait(2500);
		const content = [];
		if (thinking) content.push({ type: "thinking", thinking: paragraph(int(1, 3)), thinkingSignature: seededHex(48) });
		if (text) content.push({ type: "text", text });
		const callIds = calls.map((c) => {
			const id = `toolu_${seededHex(20)}`;
			content.push({ type: "toolCall", id, name: c.name, arguments: c.args });
			return id;
		});
		const out = Math.ceil(JSON.stringify(content).length / 4);
		const m = {
			role: "assistant",
			content,
			api: MODEL.api,
			provider: MODEL.provider,
			model: MODEL.id,
			usage: this.usage(out),
			stopReason: stopReason ?? (calls.length ? "toolUse" : "stop"),
			timestamp: Date.now(),
		};
		if (stopReason === "error") {
			m.errorMessage = errorMessage ?? "overloaded_error: Overloaded";
			m.usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } };
		}
		return { id: this.sm.appendMessage(m), callIds };
	}
	toolResult(callId, name, text, isError = false) {
		return this.msg({ role: "toolResult", toolCallId: callId, toolName: name, content: [{ type: "text", text }], isError });
	}
	/** One tool round: an assistant with n parallel calls, then their results (sizes in chars). */
	toolRound(sizes, { error = false } = {}) {
		const calls = sizes.map(() => {
			const name = choose(["read", "bash", "edit", "write", "read"]);
			const p = filePath();
			const args =
				name === "read"
					? { path: p }
					: name === "bash"
						? { command: `go test ./${p.split("/").slice(0, 2).join("/")}/...` }
						: name === "edit"
							? { path: p, oldText: codeLines(2), newText: codeLines(2) }
							: { path: p, content: codeLines(int(4, 12)) };
			return { name, args };
		});
		const a = this.assistant({ text: rand() < 0.6 ? sentence() : "", calls });
		const results = a.callIds.map((id, i) => this.toolResult(id, calls[i].name, sized(sizes[i]), error && i === 0));
		return { assistantId: a.id, resultIds: results };
	}
	/** A user turn: prompt, `rounds` tool rounds of `width` calls of about `chars` each, a final answer. */
	turn({ rounds = 1, width = 1, chars = 1500, images = 0, prompt } = {}) {
		const userId = this.user(prompt ?? paragraph(int(1, 3)), images);
		const rs_ = [];
		for (let r = 0; r < rounds; r++) rs_.push(this.toolRound(Array.from({ length: width }, () => int(Math.round(chars / 2), chars * 2))));
		const final = this.assistant({ text: paragraph(int(2, 6)) });
		return { userId, rounds: rs_, finalId: final.id };
	}
	bash(command, outputChars, exitCode = 0) {
		return this.msg({ role: "bashExecution", command, output: sized(outputChars), exitCode, cancelled: false, truncated: false });
	}
	custom(text, display = true) {
		wait(300);
		return this.sm.appendCustomMessageEntry("ledger-notes", text, display, { source: "gen" });
	}
	/** Compact as /compact would: Pi chooses the cut; the summary text is made up. */
	compact(keepRecentTokens, { retainNone = false } = {}) {
		const prep = prepareCompaction(this.sm.getBranch(), { enabled: true, reserveTokens: 16384, keepRecentTokens });
		if (!prep) throw new HarnessError(`gen ${this.name}: Pi prepared no compaction at keep ${keepRecentTokens}`, 1);
		wait(9000);
		const summary = `## Goal\n${sentence()}\n\n## Progress\n- ${sentence()}\n- ${sentence()}\n\n## Next Steps\n1. ${sentence()}`;
		return this.sm.appendCompaction(summary, retainNone ? null : prep.firstKeptEntryId, prep.tokensBefore, computeFileLists(prep.fileOps), false);
	}
	/** Leave the current leaf for `targetId` with a summary, as navigateTree does. */
	branchSummary(targetId) {
		const target = this.sm.getEntry(targetId);
		const { entries } = collectEntriesForBranchSummary(this.sm, this.sm.getLeafId(), targetId);
		const prep = prepareBranchEntries(entries, 0);
		const userLike = (target.type === "message" && target.message.role === "user") || target.type === "custom_message";
		wait(6000);
		const summary = `The user explored ${w()} ${w()} before returning: ${paragraph(int(1, 4))}`;
		return this.sm.branchWithSummary(userLike ? target.parentId : targetId, summary, computeFileLists(prep.fileOps), false);
	}
	// --- Pi >= 1.x ---------------------------------------------------------
	system(message) {
		return this.msg({ role: "system", ...message });
	}
	edit(targetId, replacement) {
		wait(50);
		return this.sm.appendContextEdit(targetId, replacement);
	}
	cacheWarm() {
		wait(240_000);
		const u = this.usage(1);
		return this.sm.appendUsage("cache_warm", MODEL.provider, MODEL.id, { ...u, input: 1, output: 1 }, "idle cache warm");
	}
	/** The failed attempt of an auto-retry: an errored assistant (and its tool results), omitted. */
	retriedError() {
		const p = filePath();
		const a = this.assistant({ text: sentence(), calls: [{ name: "read", args: { path: p } }], stopReason: "error", errorMessage: "overloaded_error: Overloaded" });
		const r = this.toolResult(a.callIds[0], "read", "Tool execution was aborted", true);
		this.edit(a.id, null);
		this.edit(r, null);
		return a.id;
	}
	finish(out) {
		const files = readdirSync(this.tmp).filter((f) => f.endsWith(".jsonl"));
		if (files.length !== 1) throw new HarnessError(`gen ${this.name}: Pi wrote ${files.length} files`, 1);
		const dest = join(out, `${this.name}.jsonl`);
		renameSync(join(this.tmp, files[0]), dest);
		rmSync(this.tmp, { recursive: true, force: true });
		return dest;
	}
}

const SYSTEM_FULL = () => ({
	content: `You are an expert coding assistant working in ${CWD}. ${paragraph(3)}`,
	sections: { environment: `<environment>\ncwd: ${CWD}\nos: linux\n</environment>`, project: `<project>\n${paragraph(2)}\n</project>` },
	toolsAdded: TOOLS,
});

// ---------------------------------------------------------------------------
// Scenarios: name -> (session, size) ; size 1 (s), 3 (m), 6 (l)
// ---------------------------------------------------------------------------
const SIZES = { s: 1, m: 3, l: 6 };
const common = {
	"c01-chat": (s, k) => {
		for (let i = 0; i < 2 + k; i++) {
			s.user(paragraph(int(1, 4)));
			s.assistant({ text: paragraph(int(3, 6 + k)) });
		}
	},
	"c02-tools-parallel": (s, k) => {
		for (let i = 0; i < 1 + k; i++) s.turn({ rounds: int(1, 2), width: int(2, 4), chars: 600 * k });
	},
	"c03-bash-custom": (s, k) => {
		for (let i = 0; i < 1 + k; i++) {
			s.turn({ rounds: 1, width: 1, chars: 1500 * k });
			s.bash(`git diff --stat ${w()}`, int(500, 4000) * k);
			if (i % 2 === 0) s.custom(`Reminder: ${paragraph(int(2, 6) * k)}`);
			s.sm.appendCustomEntry("ledger-state", { step: i, area: choose(AREAS) });
		}
		s.bash("go vet ./...", 6000 * k, 1);
		s.custom(`Review note: ${paragraph(3)}`, false);
		s.turn({ rounds: 1, width: 2, chars: 800 });
	},
	"c04-branches-labels": (s, k) => {
		const first = s.turn({ rounds: 1, width: 1, chars: 1200 * k });
		s.sm.appendSessionInfo(`ledger ${w()} work`);
		const fork = s.turn({ rounds: 1, width: 2, chars: 900 * k });
		s.sm.appendLabelChange(fork.userId, "before-refactor");
		for (let i = 0; i < k; i++) s.turn({ rounds: 2, width: 1, chars: 1500 });
		s.branchSummary(fork.finalId); // back to the fork point, summarizing the abandoned work
		s.turn({ rounds: 1, width: 1, chars: 2000 * k });
		s.branchSummary(first.userId); // a user message target: the summary goes to its parent
		s.turn({ rounds: 1, width: 3, chars: 700 * k });
		s.sm.appendLabelChange(first.finalId, "first-answer");
		s.sm.appendLabelChange(first.finalId, ""); // cleared
	},
	"c05-compactions": (s, k) => {
		for (let i = 0; i < 2 + k; i++) s.turn({ rounds: 2, width: 2, chars: 1200 * k });
		s.compact(3000 * k);
		for (let i = 0; i < 1 + k; i++) s.turn({ rounds: 1, width: 2, chars: 1000 * k });
		s.compact(2000 * k);
		s.turn({ rounds: 1, width: 1, chars: 2500 * k });
	},
	"c06-trailing-tool-results": (s, k) => {
		s.turn({ rounds: 1, width: 1, chars: 800 });
		s.user(paragraph(2));
		s.toolRound([3000 * k, 9000 * k, 30_000 * k]);
	},
	"c07-long-single-turn": (s, k) => {
		s.turn({ rounds: 1, width: 1, chars: 1000 });
		s.turn({ rounds: 3 + 2 * k, width: 2, chars: 1800 * k });
	},
	"c08-images": (s, k) => {
		for (let i = 0; i < 1 + k; i++) s.turn({ rounds: 1, width: 1, chars: 900 * k, images: int(1, 3) });
		s.user("What changed between these screenshots?", 4);
		s.assistant({ text: paragraph(4) });
	},
};
const projected = {
	"n01-system-messages": (s, k) => {
		s.system(SYSTEM_FULL());
		s.turn({ rounds: 1, width: 2, chars: 1000 * k });
		s.system({ content: "", sections: { environment: `<environment>\ncwd: ${CWD}/cmd\nos: linux\n</environment>` } });
		s.turn({ rounds: 1, width: 1, chars: 1500 * k });
		s.system({ content: "", sections: { project: null }, toolsRemoved: [{ name: "write" }] });
		for (let i = 0; i < k; i++) s.turn({ rounds: 2, width: 1, chars: 1200 * k });
		s.system({ content: `Additional instructions: ${sentence()}`, toolsAdded: [{ name: "grep", description: "Search files", parameters: { type: "object", properties: { pattern: { type: "string" } } } }] });
		s.turn({ rounds: 1, width: 2, chars: 900 * k });
	},
	"n02-context-edits": (s, k) => {
		s.system(SYSTEM_FULL());
		const t1 = s.turn({ rounds: 1, width: 2, chars: 2500 * k });
		s.edit(t1.rounds[0].resultIds[1], null); // omit a tool result
		const t2 = s.turn({ rounds: 1, width: 1, chars: 1200 * k });
		s.edit(t2.userId, { content: `(edited) ${sentence()}` }); // replace a user message
		s.edit(t2.finalId, { content: paragraph(1) }); // replace an assistant message
		const t3 = s.turn({ rounds: 2, width: 1, chars: 1500 * k });
		s.edit(t3.rounds[1].resultIds[0], { content: "first replacement" });
		s.edit(t3.rounds[1].resultIds[0], { content: `superseding replacement: ${sentence()}` }); // the later edit wins
		s.user(paragraph(2));
		s.retriedError(); // auto-retry: the failed attempt and its result omitted
		s.toolRound([1400 * k]);
		s.assistant({ text: paragraph(3) });
		for (let i = 0; i < k - 1; i++) s.turn({ rounds: 1, width: 2, chars: 1100 * k });
	},
	"n03-usage-entries": (s, k) => {
		s.system(SYSTEM_FULL());
		for (let i = 0; i < 1 + k; i++) {
			s.turn({ rounds: 1, width: int(1, 3), chars: 1400 * k });
			s.cacheWarm();
			if (i % 2) s.cacheWarm();
		}
		s.user(paragraph(1));
		s.assistant({ text: paragraph(2) });
		s.cacheWarm(); // the session ends on an idle write
	},
	"n04-retain-none": (s, k) => {
		s.system(SYSTEM_FULL());
		for (let i = 0; i < 1 + k; i++) s.turn({ rounds: 1, width: 2, chars: 1500 * k });
		s.compact(2000 * k, { retainNone: true });
		s.turn({ rounds: 1, width: 1, chars: 1200 * k });
		for (let i = 0; i < k; i++) s.turn({ rounds: 1, width: 2, chars: 1000 * k });
	},
	"n05-compaction-system-checkpoint": (s, k) => {
		s.system(SYSTEM_FULL());
		s.turn({ rounds: 1, width: 2, chars: 1200 * k });
		s.system({ content: "", sections: { environment: "<environment>\ncwd: /tmp/scratch\n</environment>" } });
		for (let i = 0; i < 1 + k; i++) s.turn({ rounds: 2, width: 1, chars: 1300 * k });
		s.system({ content: "", toolsRemoved: [{ name: "edit" }] }); // among the entries a compaction keeps
		s.turn({ rounds: 1, width: 1, chars: 900 * k });
		s.compact(1500 * k); // carries the systemMessage checkpoint
		s.turn({ rounds: 1, width: 2, chars: 1000 * k });
		s.bash("make test", 2500 * k);
		s.custom(`Status: ${paragraph(2 * k)}`);
		s.turn({ rounds: 2, width: 1, chars: 1100 * k });
	},
	"n06-everything": (s, k) => {
		s.system(SYSTEM_FULL());
		const a = s.turn({ rounds: 2, width: 3, chars: 1500 * k, images: 1 });
		s.sm.appendLabelChange(a.userId, "start");
		s.cacheWarm();
		s.edit(a.rounds[0].resultIds[0], null);
		s.bash("go build ./...", 3000 * k);
		s.custom(`Heads-up: ${paragraph(3)}`);
		s.user(paragraph(1));
		s.retriedError();
		s.assistant({ text: paragraph(2) });
		s.compact(1500 * k);
		const b = s.turn({ rounds: 2, width: 2, chars: 1300 * k });
		s.system({ content: "", sections: { project: `<project>\n${paragraph(1)}\n</project>` } });
		s.turn({ rounds: 1, width: 1, chars: 1800 * k });
		s.branchSummary(b.finalId);
		s.edit(b.userId, { content: `(clarified) ${sentence()}` });
		for (let i = 0; i < k; i++) s.turn({ rounds: 1, width: 2, chars: 1200 * k });
		s.cacheWarm();
	},
};

await runMain(async () => {
	const args = parseArgs(process.argv.slice(2), { booleans: ["compact"], values: ["out"] });
	const root = process.env.PI_HARNESS_ROOT ? resolve(process.env.PI_HARNESS_ROOT, "../..") : process.cwd();
	const out = resolve(args.out ?? join(root, "testdata/corpus", `gen-${PI_VERSION}`));
	mkdirSync(out, { recursive: true });
	const scenarios = { ...common, ...(PROJECTED ? projected : {}) };
	const written = [];
	for (const [base, build] of Object.entries(scenarios)) {
		for (const [size, k] of Object.entries(SIZES)) {
			const name = `${base}-${size}`;
			if (args._.length && !args._.some((f) => name.includes(f))) continue;
			const s = new Session(name, out);
			build(s, k);
			written.push(s.finish(out));
		}
	}
	// Byte edits of a Pi-written file for the loaders' edge cases.
	if (!args._.length || args._.some((f) => "x-".includes(f) || f.startsWith("x-"))) {
		const src = readFileSync(join(out, "c01-chat-s.jsonl"));
		writeFileSync(join(out, "x-bom-c01-chat-s.jsonl"), Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), src]));
		writeFileSync(join(out, "x-no-final-newline-c01-chat-s.jsonl"), src.subarray(0, src.length - 1));
		written.push(join(out, "x-bom-c01-chat-s.jsonl"), join(out, "x-no-final-newline-c01-chat-s.jsonl"));
	}
	return { result: { piVersion: PI_VERSION, out, files: written.map((f) => f.slice(out.length + 1)) }, compact: args.compact };
}, USAGE);
