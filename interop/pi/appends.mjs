// interop/pi/pi exec interop/pi/appends.mjs LIST.json
//
// Many session files that another program appended a compaction or a branch summary to, in
// one process (make interop-releases checks thousands): LIST.json is a JSON array of file
// paths. Prints a JSON array, one element per file in order:
//   { file, leafId, messageEntryIds, messages, writes: {same, ours, pi} }
// where leafId, messageEntryIds and messages are what `context` prints (leafId,
// messageEntryIds, context.messages) and writes what writes.mjs prints; or { file, error }.
import { readFileSync } from "node:fs";
import { contextReport } from "./lib/context.mjs";
import { HarnessError, parseArgs, runMain } from "./lib/pi.mjs";
import { piWrites } from "./lib/writes.mjs";

const USAGE = "usage: interop/pi/pi exec interop/pi/appends.mjs LIST.json";

await runMain(async () => {
	const args = parseArgs(process.argv.slice(2));
	if (args._.length !== 1) throw new HarnessError("expected one LIST.json", 64);
	const files = JSON.parse(readFileSync(args._[0], "utf8"));
	const out = [];
	for (const file of files) {
		try {
			const { result } = await contextReport([file]);
			out.push({ file, leafId: result.leafId, messageEntryIds: result.messageEntryIds, messages: result.context.messages, writes: piWrites(file) });
		} catch (err) {
			out.push({ file, error: String(err?.message ?? err) });
		}
	}
	return { result: out, compact: true };
}, USAGE);
