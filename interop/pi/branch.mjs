// interop/pi/pi branch FILE --to TARGET_ID [--from LEAF_ID] [--token-budget N] [--compact]
// The command line of lib/branch.mjs (what it prints is described there).
import { runMain } from "./lib/pi.mjs";
import { branchReport, USAGE } from "./lib/branch.mjs";

await runMain(() => branchReport(process.argv.slice(2)), USAGE);
