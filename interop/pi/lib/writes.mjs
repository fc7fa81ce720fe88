// What Pi itself writes for the entry another program appended last to a session file (see
// interop/pi/writes.mjs and appends.mjs).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { HarnessError, loadSession } from "./pi.mjs";

/**
 * The last line of file must be a compaction or a branch_summary. The file without it is
 * loaded with Pi's own SessionManager (on a private copy), which is asked to append the same
 * entry the way Pi's agent does (appendCompaction; branchWithSummary from the leaf the
 * summary left) with the same summary, cut, tokens, details and usage, at the same time.
 * Returns { same, ours, pi }: the two lines, Pi's with our id; same when byte for byte equal.
 * leaf: the leaf Pi was on before it appended (default: the file's leaf without the last line).
 */
export function piWrites(file, leaf) {
	const text = readFileSync(file, "utf8");
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
		if (leaf) sm.branch(leaf);
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
		return { same: pi === ours, ours, pi };
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
}
