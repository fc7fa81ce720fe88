// interop/pi/pi goldens [--check] [--only NAME-FILTER]
//
// The goldens of the selected Pi, testdata/expected/<version>/, from the live Pi: for every
// corpus file (testdata/corpus, bad/, pi-generated/, pi-repo/, gen-*/)
//   NAME.context.json                 context
//   NAME.cut-20000.json, -5000, -1000 cut at those keepRecentTokens
//   NAME.cut-override.json            cut with testdata/pi-settings/model-overrides.json for
//                                     the session's model (Pi >= 1.x applies modelOverrides)
//   NAME.error.json                   instead of all of these when Pi cannot load the file
// NAME is the file's base name; bad/ files get "bad-", gen-V/ files "gen-V-" before it. The
// "file" field holds the path under testdata/corpus (e.g. "gen-1.6.0/n02-context-edits-s.jsonl"),
// so goldens do not depend on where the clone is.
// One line of JSON each. --check rewrites nothing: it compares every golden with the live Pi
// byte for byte, and regenerates gen-<version>/ into a temp dir and compares it with the
// committed one; it ends with "N passed, M failed".
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { spawnSync } from "node:child_process";
import { contextReport } from "./lib/context.mjs";
import { cutReport } from "./lib/cut.mjs";
import { HarnessError, PI_VERSION, parseArgs } from "./lib/pi.mjs";

const here = process.env.PI_HARNESS_ROOT;
const root = resolve(here, "../..");
const corpus = join(root, "testdata/corpus");
const settings = join(root, "testdata/pi-settings/model-overrides.json");

/** [golden name, file] for every corpus file, in a stable order. */
export function corpusFiles() {
	const out = [];
	const add = (dir, prefix) => {
		const d = join(corpus, dir);
		if (!existsSync(d)) return;
		for (const f of readdirSync(d).sort()) if (f.endsWith(".jsonl")) out.push([prefix + f.slice(0, -6), join(d, f)]);
	};
	add(".", "");
	add("bad", "bad-");
	add("pi-generated", "");
	add("pi-repo", "");
	for (const g of readdirSync(corpus).sort()) if (g.startsWith("gen-")) add(g, `${g}-`);
	return out;
}

const runs = (file) => [
	["context", () => contextReport([file])],
	...[20000, 5000, 1000].map((k) => [`cut-${k}`, () => cutReport([file, "--keep-recent-tokens", String(k)])]),
	["cut-override", () => cutReport([file, "--settings", settings])],
];

async function goldensOf(name, file) {
	const out = {};
	for (const [kind, run] of runs(file)) {
		try {
			const { result } = await run();
			result.file = relative(corpus, file);
			out[`${name}.${kind}.json`] = `${JSON.stringify(result)}\n`;
		} catch (err) {
			if (!(err instanceof HarnessError) || err.exitCode !== 2) throw new Error(`${name} ${kind}: ${err.stack ?? err}`);
			const msg = err.message.replaceAll(file, relative(corpus, file));
			return { [`${name}.error.json`]: `${JSON.stringify({ piVersion: PI_VERSION, file: relative(corpus, file), exitCode: 2, error: msg })}\n` };
		}
	}
	return out;
}

const args = parseArgs(process.argv.slice(2), { booleans: ["check"], values: ["only"] });
const dir = join(root, "testdata/expected", PI_VERSION);
let passed = 0;
let failed = 0;
const want = new Set();
for (const [name, file] of corpusFiles()) {
	if (args.only && !name.includes(args.only)) continue;
	const goldens = await goldensOf(name, file);
	for (const [g, text] of Object.entries(goldens)) {
		want.add(g);
		const p = join(dir, g);
		if (!args.check) {
			mkdirSync(dir, { recursive: true });
			writeFileSync(p, text);
			continue;
		}
		const have = existsSync(p) ? readFileSync(p, "utf8") : null;
		if (have === text) passed++;
		else {
			failed++;
			console.log(`FAIL ${PI_VERSION}/${g}: ${have === null ? "missing" : "differs from the live Pi"} (interop/pi/pi goldens rewrites it)`);
		}
	}
}
if (!args.only && existsSync(dir)) {
	for (const g of readdirSync(dir).sort()) {
		if (want.has(g)) continue;
		if (args.check) {
			failed++;
			console.log(`FAIL ${PI_VERSION}/${g}: no corpus file makes it (stale)`);
		} else rmSync(join(dir, g));
	}
}
if (args.check && !args.only) {
	// The generated corpus: regenerating gives the committed bytes.
	const committed = join(corpus, `gen-${PI_VERSION}`);
	const tmp = mkdtempSync(join(tmpdir(), "compactor-gen-check-"));
	try {
		const r = spawnSync(process.execPath, [join(here, "gen.mjs"), "--out", tmp, "--compact"], { encoding: "utf8" });
		if (r.status !== 0) throw new Error(`gen failed: ${r.stderr}`);
		const names = new Set([...readdirSync(tmp), ...(existsSync(committed) ? readdirSync(committed) : [])]);
		for (const f of [...names].sort()) {
			const a = existsSync(join(tmp, f)) ? readFileSync(join(tmp, f)) : null;
			const b = existsSync(join(committed, f)) ? readFileSync(join(committed, f)) : null;
			if (a && b && a.equals(b)) passed++;
			else {
				failed++;
				console.log(`FAIL gen-${PI_VERSION}/${f}: ${!b ? "not committed" : !a ? "no longer generated" : "regenerating gives other bytes"} (interop/pi/pi gen rewrites it)`);
			}
		}
	} finally {
		rmSync(tmp, { recursive: true, force: true });
	}
}
if (args.check) {
	console.log(`Pi ${PI_VERSION}: goldens and generated corpus checked against the live Pi`);
	console.log(`goldens: ${passed} passed, ${failed} failed`);
	process.exitCode = failed ? 1 : 0;
} else console.log(`wrote ${want.size} goldens of Pi ${PI_VERSION} to ${dir}`);
