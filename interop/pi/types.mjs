// interop/pi/pi types: the session entry types and message roles the selected Pi declares,
// read from its type declarations (dist/core/session-manager.d.ts: each entry interface's
// `type: "..."`; dist/core/messages.d.ts and pi-ai's dist/types.d.ts: each message's
// `role: "..."`). make interop-releases compares them with what compactor knows: a new one
// is a change of Pi's format that compactor must learn before it serves that release.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { PI_PACKAGE_DIR, PI_SCOPE, PI_VERSION, runMain } from "./lib/pi.mjs";

const literals = (file, field) => {
	if (!existsSync(file)) return [];
	const re = new RegExp(`^\\s*${field}: "([A-Za-z_]+)";`, "gm");
	return [...readFileSync(file, "utf8").matchAll(re)].map((m) => m[1]);
};
const uniq = (xs) => [...new Set(xs)].sort();

await runMain(() => {
	const dist = join(PI_PACKAGE_DIR, "dist");
	// pi-ai where Node would find it: nested under Pi's package first (0.73.0's install puts it
	// there), then beside it in the same scope.
	const piAi = [join(PI_PACKAGE_DIR, "node_modules", PI_SCOPE, "pi-ai"), join(PI_PACKAGE_DIR, "..", "pi-ai")]
		.map((d) => join(d, "dist", "types.d.ts"))
		.find((f) => existsSync(f));
	if (!piAi) throw new Error(`pi-ai's dist/types.d.ts not found for Pi ${PI_VERSION}`);
	const entryTypes = uniq(literals(join(dist, "core", "session-manager.d.ts"), "type"));
	const roles = uniq([...literals(join(dist, "core", "messages.d.ts"), "role"), ...literals(piAi, "role")]);
	return { result: { piVersion: PI_VERSION, entryTypes, roles }, compact: process.argv.includes("--compact") };
}, "usage: interop/pi/pi types [--compact]");
