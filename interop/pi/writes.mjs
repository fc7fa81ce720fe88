// interop/pi/pi exec interop/pi/writes.mjs FILE [--leaf ID] [--compact]
//
// What Pi itself writes for the entry another program appended last to FILE (lib/writes.mjs):
// prints { same, ours, pi } where ours and pi are the two lines with Pi's id replaced by ours;
// same tells whether they are byte for byte equal.
//
// --leaf ID: the leaf Pi was on before it appended (default: the file's leaf without the
// last line; a branch summary left it, a compaction hangs off it).
import { HarnessError, parseArgs, runMain } from "./lib/pi.mjs";
import { piWrites } from "./lib/writes.mjs";

const USAGE = "usage: interop/pi/pi exec interop/pi/writes.mjs FILE [--leaf ID] [--compact]";

await runMain(() => {
	const args = parseArgs(process.argv.slice(2), { booleans: ["compact"], values: ["leaf"] });
	if (args._.length !== 1) throw new HarnessError("expected one FILE", 64);
	return { result: piWrites(args._[0], args.leaf), compact: args.compact };
}, USAGE);
