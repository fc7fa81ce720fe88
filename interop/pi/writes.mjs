// interop/pi/pi exec interop/pi/writes.mjs FILE [--leaf ID] [--compact]
//
// What Pi itself writes for the entry another program appended last to FILE. The last line
// must be a compaction or a branch_summary; the file without it is loaded with Pi's own
// SessionManager (on a private copy), which is then asked to append the same entry the way
// Pi's agent does (appendCompaction for a compaction; branchWithSummary, from the leaf the
// summary left, for a branch summary) with the same summary, cut, tokens, details and usage,
// at the same time. Prints { same, ours, pi } where ours and pi are the two lines with Pi's
// id replaced by ours; same tells whether they are byte for byte equal.
//
// --leaf ID: the leaf Pi was on before it appended (default: the file's leaf without the
// last line; a branch summary left it, a compaction hangs off it).
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { HarnessError, loadSession, parseArgs, runMain } from "./lib/pi.mjs";

const USAGE = "usage: interop/pi/pi exec interop/pi/writes.mjs FILE [--leaf ID] [--compact]";

await runMain(() => {
	const args = parseArgs(process.argv.slice(2), { booleans: ["compact"], values: ["leaf"] });
	if (args._.length !== 1) throw new HarnessError("expected one FILE", 64);
	const text = readFileSync(args._[0], "utf8");
	const lines = text.replace(/\n$/, "").split("\n");
	const ours = lines.pop();
	const entry = JSON.parse(ours);
	if (entry.type !== "compaction" && entry.type !== "branch_summary") {
		throw new HarnessError(`the last line is a ${entry.type}, not a compaction or a branch_summary`, 64);
	}
	const dir = mkdtempSync(join(tmpdir(), "compactor-writes-"));
	try {
		const before = join(dir, "before.jsonl");
		writeFileSync(before, `${lines.join("\n")}\n`);
		const { sm } = loadSession(before);
		sm.persist = false; // its private copy is gone: keep the entry in memory only
		if (args.leaf) sm.branch(args.leaf);
		const RealDate = Date;
		const at = RealDate.parse(entry.timestamp);
		globalThis.Date = class extends RealDate {
			constructor(...a) {
				if (a.length === 0) super(at);
				else super(...a);
			}
			static now() {
				return at;
			}
		};
		let id;
		try {
			if (entry.type === "compaction") {
				id = sm.appendCompaction(entry.summary, entry.firstKeptEntryId, entry.tokensBefore, entry.details, entry.fromHook, entry.usage);
			} else {
				id = sm.branchWithSummary(entry.parentId, entry.summary, entry.details, entry.fromHook, entry.usage);
			}
		} finally {
			globalThis.Date = RealDate;
		}
		const written = sm.getEntry(id);
		const pi = JSON.stringify({ ...written, id: entry.id });
		return { result: { same: pi === ours, ours, pi }, compact: args.compact };
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
}, USAGE);
