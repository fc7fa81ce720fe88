// The one place where the harness touches Pi: it imports the selected Pi package (the
// wrapper interop/pi/pi sets PI_PACKAGE_DIR) and offers one API over the versions the
// matrix holds, so the scripts never ask which Pi they run.
//
// Pi's package entry pulls in its TUI and providers; the functions we need live in a few
// modules under dist/core, and the package's exports map blocks subpath imports, so they
// are imported by file URL. `selftest` checks that each is the very object the entry exports.
//
// Differences hidden here (0.73.0 -> 1.6.0, every published release):
//   - the package name (@mariozechner -> @earendil-works at 0.74.0)
//   - >= 0.87 builds context from a projection (context edits applied, system messages folded
//     into compactions); 0.80.6 .. 0.86 from buildContextEntries + sessionEntryToContextMessages
//     (an entry may give two messages: a compaction's systemMessage and its summary); older
//     releases from the raw path, one message per entry. `project()` gives all the same shape.
//   - >= 0.87 prepareCompaction works on the projection and no longer returns cut indices;
//     `planEntries()` maps its messages back to entries (cut.mjs).
//   - >= 0.86 SettingsManager resolves compaction settings per model (modelOverrides).
// Which of these a release has is read from what it exports (the flags below), never from
// its version number.

import crypto from "node:crypto";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { pathToFileURL } from "node:url";

export class HarnessError extends Error {
	/** exitCode: 2 Pi cannot load the file, 4 the harness's own consistency check failed, 64 usage. */
	constructor(message, exitCode = 2) {
		super(message);
		this.exitCode = exitCode;
	}
}

// Pi draws entry ids from crypto.randomUUID (migrating a v1 file makes new ones). The harness
// seeds it, so the same input gives the same output on every run and goldens can be compared
// byte for byte. PI_HARNESS_RANDOM=1 keeps Node's own generator.
let seed = 0x2545f491;
export function seededHex(n) {
	let s = "";
	while (s.length < n) {
		seed = (seed + 0x6d2b79f5) >>> 0; // mulberry32
		let t = Math.imul(seed ^ (seed >>> 15), seed | 1);
		t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
		s += ((t ^ (t >>> 14)) >>> 0).toString(16).padStart(8, "0");
	}
	return s.slice(0, n);
}
export function reseed(n) {
	seed = n >>> 0;
}
if (process.env.PI_HARNESS_RANDOM !== "1") {
	crypto.randomUUID = () => {
		const h = seededHex(32);
		return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
	};
	syncBuiltinESMExports();
}

const pkgDir = process.env.PI_PACKAGE_DIR;
if (!pkgDir || !existsSync(join(pkgDir, "package.json"))) {
	process.stderr.write("error: PI_PACKAGE_DIR is not set to an installed Pi package; run scripts through interop/pi/pi\n");
	process.exit(64);
}
export const PI_PACKAGE_DIR = pkgDir;
const pkgJson = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
export const PI_VERSION = pkgJson.version;
export const PI_PACKAGE = pkgJson.name;
export const PI_SCOPE = PI_PACKAGE.split("/")[0]; // @mariozechner or @earendil-works

const distUrl = (p) => pathToFileURL(join(pkgDir, "dist", p)).href;

/** Import a package that Pi itself depends on (e.g. `${PI_SCOPE}/pi-ai`), from Pi's install. */
export async function importDependency(name) {
	for (let d = pkgDir; d !== "/"; d = resolve(d, "..")) {
		const dep = join(d, "node_modules", name);
		if (!existsSync(join(dep, "package.json"))) continue;
		const pj = JSON.parse(readFileSync(join(dep, "package.json"), "utf8"));
		let entry = pj.exports?.["."] ?? pj.exports ?? pj.module ?? pj.main ?? "index.js";
		while (entry && typeof entry === "object") entry = entry.import ?? entry.default;
		return import(pathToFileURL(join(dep, entry)).href);
	}
	throw new HarnessError(`${name} is not installed next to ${pkgDir}`, 1);
}

export const entryUrl = distUrl("index.js");
const sessionMod = await import(distUrl("core/session-manager.js"));
const compactionMod = await import(distUrl("core/compaction/compaction.js"));
const utilsMod = await import(distUrl("core/compaction/utils.js"));
const branchMod = await import(distUrl("core/compaction/branch-summarization.js"));
const messagesMod = await import(distUrl("core/messages.js"));
const settingsMod = await import(distUrl("core/settings-manager.js"));

/** The names the scripts use, with the module each comes from (selftest compares them with the entry's). */
export const internals = {
	SessionManager: sessionMod,
	buildSessionContext: sessionMod,
	loadEntriesFromFile: sessionMod,
	CURRENT_SESSION_VERSION: sessionMod,
	prepareCompaction: compactionMod,
	findCutPoint: compactionMod,
	estimateTokens: compactionMod,
	estimateContextTokens: compactionMod,
	shouldCompact: compactionMod,
	getLastAssistantUsage: compactionMod,
	DEFAULT_COMPACTION_SETTINGS: compactionMod,
	computeFileLists: utilsMod,
	serializeConversation: utilsMod,
	collectEntriesForBranchSummary: branchMod,
	prepareBranchEntries: branchMod,
	convertToLlm: messagesMod,
	SettingsManager: settingsMod,
};

export const {
	SessionManager,
	buildSessionContext,
	loadEntriesFromFile,
	CURRENT_SESSION_VERSION,
	buildSessionProjection, // >= 0.87
	buildContextEntries, // >= 0.80.6
	sessionEntryToContextMessages, // >= 0.80.6
	projectContextEntry, // >= 1.5 (exported)
} = sessionMod;
export const {
	prepareCompaction,
	findCutPoint,
	estimateTokens,
	estimateContextTokens,
	estimateProjectedContextTokens, // >= 0.87
	shouldCompact,
	getLastAssistantUsage,
	DEFAULT_COMPACTION_SETTINGS,
} = compactionMod;
export const { computeFileLists, serializeConversation } = utilsMod;
export const { collectEntriesForBranchSummary, prepareBranchEntries } = branchMod;
export const { convertToLlm } = messagesMod;
export const { SettingsManager } = settingsMod;

/** Pi >= 0.87: context and plans over buildSessionProjection (context edits, system checkpoints). */
export const PROJECTED = typeof buildSessionProjection === "function";
/** Pi >= 0.80.6: each entry's context messages come from sessionEntryToContextMessages. */
export const ENTRY_MESSAGES = typeof sessionEntryToContextMessages === "function" && typeof buildContextEntries === "function";
/** Pi >= 1.5: branch summaries honour context edits (it exports projectContextEntry for them). */
export const BRANCH_EDITS = typeof projectContextEntry === "function";
/** Pi >= 0.86: system messages (prompt state) and usage entries; compactions carry a systemMessage. */
export const SYSTEM_MESSAGES = typeof SessionManager.prototype.appendUsage === "function";

/** The entry types the selected Pi knows; anything else is reported as unknown. */
export const KNOWN_TYPES = new Set([
	"message",
	"thinking_level_change",
	"model_change",
	"compaction",
	"branch_summary",
	"custom",
	"custom_message",
	"label",
	"session_info",
	...(SYSTEM_MESSAGES ? ["usage"] : []),
	...(PROJECTED ? ["context_edit"] : []),
]);

export const deepEqual = isDeepStrictEqual;

// ---------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------

/**
 * Open a session file with Pi's SessionManager.open() on a private temp copy (Pi rewrites
 * files it migrates, repairs or finds corrupt). Returns { sm, file, header, diagnostics }.
 * Throws HarnessError(2) where Pi would not load the file as it is.
 */
export function loadSession(path) {
	const abs = resolve(path);
	reseed(0x2545f491); // the same ids for the same file, whatever was loaded before
	if (!existsSync(abs)) throw new HarnessError(`${abs}: no such file`);
	if (!statSync(abs).isFile()) throw new HarnessError(`${abs}: not a regular file`);
	const raw = readFileSync(abs);
	const text = raw.toString("utf8");
	const bom = raw.length >= 3 && raw[0] === 0xef && raw[1] === 0xbb && raw[2] === 0xbf;

	const tmp = mkdtempSync(join(tmpdir(), "compactor-pi-"));
	const copy = join(tmp, basename(abs));
	try {
		copyFileSync(abs, copy);
		const parsed = loadEntriesFromFile(copy);
		if (parsed.length === 0) {
			let why = "no valid session header (the first line that parses as JSON must be {\"type\":\"session\",\"id\":<string>,...})";
			if (text.trim() === "") why = "file is empty";
			else if (bom) why = `no valid session header: the file starts with a UTF-8 byte-order mark, which Pi ${PI_VERSION} does not skip`;
			let then = "SessionManager.open() would discard the content and start a new session.";
			if (text.length === 0) then = "SessionManager.open() would write a new session header into it.";
			else if (PROJECTED) then = "SessionManager.open() refuses it.";
			throw new HarnessError(`Pi ${PI_VERSION} cannot load ${abs}: ${why}; ${then}`);
		}
		let sm;
		try {
			sm = SessionManager.open(copy, tmp);
		} catch (err) {
			throw new HarnessError(`Pi ${PI_VERSION} cannot load ${abs}: ${err.message}`);
		}
		if (sm.getSessionId() !== parsed[0].id) {
			throw new HarnessError(`Pi ${PI_VERSION} cannot load ${abs}: the session id changed while opening (${parsed[0].id} -> ${sm.getSessionId()})`);
		}
		const diagnostics = diagnose(text, bom, parsed, sm);
		return { sm, file: abs, header: sm.getHeader(), diagnostics };
	} finally {
		rmSync(tmp, { recursive: true, force: true });
	}
}

/** What Pi accepts without a word: the harness says it. */
function diagnose(text, bom, parsed, sm) {
	const d = { warnings: [] };
	const lines = text.split("\n");
	const malformed = [];
	lines.forEach((line, i) => {
		if (!line.trim()) return;
		try {
			JSON.parse(line);
		} catch {
			malformed.push(i + 1);
		}
	});
	if (bom) {
		d.bom = true;
		d.warnings.push(`the file starts with a UTF-8 byte-order mark; Pi ${PI_VERSION} ignores it (Pi >= 1.x refuses such a file)`);
		if (malformed[0] === 1) malformed.shift(); // the header line with its mark: trimmed by this Pi
	}
	if (malformed.length) {
		d.malformedLines = malformed;
		d.warnings.push(`${malformed.length} line(s) are not valid JSON; Pi skips them silently (lines ${malformed.slice(0, 10).join(",")}${malformed.length > 10 ? ",..." : ""})`);
	}
	if (text.length > 0 && !text.endsWith("\n")) {
		d.missingFinalNewline = true;
		d.warnings.push(PROJECTED ? "the last line has no newline; Pi writes one to the file when it loads it" : "the last line has no newline");
	}
	const headers = parsed.filter((e) => e?.type === "session");
	if (headers.length > 1) {
		d.extraHeaders = headers.length - 1;
		d.warnings.push(`${headers.length} session header lines; Pi uses the first and ignores the others, keeping the entries after them`);
	}
	const fileVersion = parsed[0].version ?? 1;
	if (fileVersion < CURRENT_SESSION_VERSION) {
		d.migratedFromVersion = fileVersion;
		d.warnings.push(`file is session version ${fileVersion}; Pi migrated it to v${CURRENT_SESSION_VERSION} in memory (and would rewrite the file in place; ids generated by migration are random)`);
	} else if (fileVersion > CURRENT_SESSION_VERSION) {
		d.warnings.push(`file declares version ${fileVersion} > ${CURRENT_SESSION_VERSION}; Pi loads it without migration`);
	}
	const entries = sm.getEntries();
	const seen = new Set();
	const dup = [];
	let noId = 0;
	for (const e of entries) {
		if (typeof e.id !== "string" || !e.id) noId++;
		else if (seen.has(e.id)) dup.push(e.id);
		else seen.add(e.id);
	}
	if (noId) d.warnings.push(`${noId} entries without an id`);
	if (dup.length) {
		d.duplicateIds = dup;
		d.warnings.push(`${dup.length} duplicate entry id(s); Pi's index keeps the LAST entry for an id`);
	}
	const orphans = entries.filter((e) => e.parentId != null && !seen.has(e.parentId)).map((e) => e.id);
	if (orphans.length) {
		d.orphanIds = orphans;
		d.warnings.push(`${orphans.length} entries whose parentId does not exist; their path stops there`);
	}
	const unknown = [...new Set(entries.map((e) => e.type).filter((t) => !KNOWN_TYPES.has(t)))];
	if (unknown.length) {
		d.unknownTypes = unknown;
		d.warnings.push(`entry types Pi ${PI_VERSION} does not know (it keeps them, they add nothing to context): ${unknown.join(", ")}`);
	}
	return d;
}

/** Move the leaf as SessionManager.branch() does (nothing appended); "null" resets it. */
export function applyLeaf(sm, leaf) {
	if (leaf === undefined) return;
	if (leaf === "null" || leaf === "") {
		sm.resetLeaf();
		return;
	}
	if (!sm.getEntry(leaf)) throw new HarnessError(`--leaf ${leaf}: no such entry id`);
	sm.branch(leaf);
}

// ---------------------------------------------------------------------------
// Projection: which path entry each context message comes from
// ---------------------------------------------------------------------------

/**
 * The context of `path` as a list of { sourceEntry, messages }, in context order.
 * >= 0.87: Pi's own buildSessionProjection (exact provenance). 0.80.6 .. 0.86: Pi's own
 * buildContextEntries, each entry with its sessionEntryToContextMessages. Older: the path as
 * buildSessionContext walks it (latest compaction, kept entries, the rest); the messages are
 * then matched against buildSessionContext's output by identity or equality.
 */
export function project(path) {
	if (PROJECTED) {
		const p = buildSessionProjection(path);
		return { entries: p.entries, messages: p.messages };
	}
	if (ENTRY_MESSAGES) {
		const entries = buildContextEntries(path).map((e) => ({ sourceEntry: e, messages: sessionEntryToContextMessages(e) }));
		return { entries, messages: entries.flatMap((p) => p.messages) };
	}
	const messages = buildSessionContext(path).messages;
	let ci = -1;
	for (let i = path.length - 1; i >= 0; i--)
		if (path[i].type === "compaction") {
			ci = i;
			break;
		}
	let order = path;
	if (ci >= 0) {
		const c = path[ci];
		const kept = path.findIndex((e) => e.id === c.firstKeptEntryId);
		order = [c, ...(kept >= 0 && kept < ci ? path.slice(kept, ci) : []), ...path.slice(ci + 1)];
	}
	// 0.73's buildSessionContext turns an entry into at most one message.
	const entries = [];
	let k = 0;
	for (const e of order) {
		const m = messages[k];
		const out = [];
		if (m !== undefined && entryMakes073(e, m)) {
			out.push(m);
			k++;
		}
		entries.push({ sourceEntry: e, messages: out });
	}
	if (k !== messages.length) throw new HarnessError(`internal: ${messages.length - k} context message(s) of Pi ${PI_VERSION} match no path entry`, 4);
	return { entries, messages };
}

function entryMakes073(e, m) {
	switch (e.type) {
		case "message":
			return e.message === m;
		case "custom_message":
			return m.role === "custom" && m.customType === e.customType && deepEqual(m.content, e.content);
		case "branch_summary":
			return m.role === "branchSummary" && m.summary === e.summary && m.fromId === e.fromId;
		case "compaction":
			return m.role === "compactionSummary" && m.summary === e.summary && m.tokensBefore === e.tokensBefore;
		default:
			return false;
	}
}

// ---------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------

/**
 * Compaction settings as Pi resolves them: built-in defaults, then a Pi settings.json (its
 * compaction block, modelOverrides["provider/modelId"] included where this Pi knows them,
 * through Pi's own SettingsManager), then explicit flags.
 */
export function compactionSettings({ settingsFile, model, keepRecentTokens, reserveTokens }) {
	let s = { ...DEFAULT_COMPACTION_SETTINGS };
	if (settingsFile) {
		let json;
		try {
			json = JSON.parse(readFileSync(settingsFile, "utf8"));
		} catch (err) {
			throw new HarnessError(`--settings ${settingsFile}: ${err.message}`, 64);
		}
		const mgr = SettingsManager.inMemory(json);
		const m = model ? { provider: model.provider, id: model.modelId } : undefined;
		try {
			s = { ...s, ...mgr.getCompactionSettings(m) };
		} catch (err) {
			throw new HarnessError(`--settings ${settingsFile}: ${err.message}`, 64);
		}
	}
	s.enabled = true;
	if (keepRecentTokens !== undefined) s.keepRecentTokens = keepRecentTokens;
	if (reserveTokens !== undefined) s.reserveTokens = reserveTokens;
	return s;
}

// ---------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------

/** argv -> { _: positional, flag: value|true }; unknown flags are usage errors. */
export function parseArgs(argv, { booleans = [], values = [] } = {}) {
	const out = { _: [] };
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		if (!a.startsWith("--")) {
			out._.push(a);
			continue;
		}
		const eq = a.indexOf("=");
		const k = eq < 0 ? a.slice(2) : a.slice(2, eq);
		if (booleans.includes(k)) out[k] = true;
		else if (values.includes(k)) {
			const v = eq >= 0 ? a.slice(eq + 1) : argv[++i];
			if (v === undefined) throw new HarnessError(`--${k} needs a value`, 64);
			out[k] = v;
		} else throw new HarnessError(`unknown option ${a}`, 64);
	}
	return out;
}

export function intArg(v, name) {
	if (v === undefined) return undefined;
	const n = Number(v);
	if (!Number.isSafeInteger(n) || n < 0) throw new HarnessError(`--${name} must be a non-negative integer, got ${v}`, 64);
	return n;
}

/** Run main() -> { result, compact }, print JSON; exit 0, or 2/4/64 (HarnessError), 1 (Pi threw). */
export async function runMain(main, usage) {
	process.stdout.on("error", (e) => {
		if (e.code === "EPIPE") process.exit(0);
		throw e;
	});
	try {
		if (process.argv.includes("--help")) {
			process.stdout.write(`${usage}\n`);
			return;
		}
		const { result, compact } = await main();
		process.stdout.write(`${compact ? JSON.stringify(result) : JSON.stringify(result, null, 2)}\n`);
	} catch (err) {
		if (err instanceof HarnessError) {
			process.stderr.write(`error: ${err.message}\n`);
			if (err.exitCode === 64) process.stderr.write(`${usage}\n`);
			process.exitCode = err.exitCode;
			return;
		}
		process.stderr.write(`error: Pi ${PI_VERSION} threw: ${err?.stack || err}\n`);
		process.exitCode = 1;
	}
}

/** "message:user", "compaction", ... for a path entry. */
export const entryType = (e) => (e.type === "message" ? `message:${e.message?.role}` : e.type);
