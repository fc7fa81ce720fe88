// interop/pi/pi cut FILE [--keep-recent-tokens N] [--reserve-tokens N] [--context-window N]
// The command line of lib/cut.mjs (what it prints is described there).
import { runMain } from "./lib/pi.mjs";
import { cutReport, USAGE } from "./lib/cut.mjs";

await runMain(() => cutReport(process.argv.slice(2)), USAGE);
