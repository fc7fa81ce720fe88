#!/usr/bin/env node
// Usage: interop/pi/pi exec chaos/pi-load-many.mjs FILE...
//
// Loads each session file with the real Pi library (through the harness's lib/pi.mjs, on a
// temporary copy, as `interop/pi/pi context` does) in one process, and prints one JSON line per
// file: {"file", "ok", "error", "firstRole", "leafId"}. One Node start for hundreds of files:
// the chaos suite's check that Pi still loads everything.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const files = process.argv.slice(2);
const { loadSession } = await import(pathToFileURL(join(process.env.PI_HARNESS_ROOT, "lib", "pi.mjs")).href);
for (const file of files) {
	const out = { file, ok: false };
	try {
		const { sm } = loadSession(file);
		const ctx = sm.buildSessionContext();
		out.ok = true;
		out.leafId = sm.getLeafId();
		out.firstRole = ctx.messages.length ? ctx.messages[0].role : null;
	} catch (e) {
		out.error = String(e && e.message ? e.message : e);
	}
	process.stdout.write(JSON.stringify(out) + "\n");
}
