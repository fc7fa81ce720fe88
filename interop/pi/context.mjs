// interop/pi/pi context FILE [--leaf ID|null] [--llm] [--entries] [--projection] [--compact] [--strict]
// The command line of lib/context.mjs (what it prints is described there).
import { runMain } from "./lib/pi.mjs";
import { contextReport, USAGE } from "./lib/context.mjs";

await runMain(() => contextReport(process.argv.slice(2)), USAGE);
