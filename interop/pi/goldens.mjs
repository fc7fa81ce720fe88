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
// One line of JSON each, in the golden store of lib/store.mjs (a golden the same as the
// pinned release before it is not stored again). --check rewrites nothing: it compares every
// golden with the live Pi byte for byte, and, for a release with a committed gen-<version>/,
// regenerates it into a temp dir and compares; it ends with "N passed, M failed".
//
// --out DIR writes the goldens into DIR instead (a release that is not pinned: make
// interop-releases), and --gen DIR adds the sessions of DIR as that release's own generated
// sessions (`gen --out DIR`), named own-<version>-NAME, filed as own-<version>/NAME.jsonl.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { spawnSync } from "node:child_process";
import { contextReport } from "./lib/context.mjs";
import { cutReport } from "./lib/cut.mjs";
import { HarnessError, PI_VERSION, parseArgs } from "./lib/pi.mjs";
import { goldenStore, previousPinned } from "./lib/store.mjs";

const here = process.env.PI_HARNESS_ROOT;
const root = resolve(here, "../..");
const corpus = join(root, "testdata/corpus");
const settings = join(root, "testdata/pi-settings/model-overrides.json");

/** [golden name, file] for every corpus file, in a stable order. */
export function corpusFiles(extraGen) {
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
	if (extraGen) for (const f of readdirSync(extraGen).sort()) if (f.endsWith(".jsonl")) out.push([`own-${PI_VERSION}-${f.slice(0, -6)}`, join(extraGen, f)]);
	return out;
}

const runs = (file) => [
	["context", () => contextReport([file])],
	...[20000, 5000, 1000].map((k) => [`cut-${k}`, () => cutReport([file, "--keep-recent-tokens", String(k)])]),
	["cut-override", () => cutReport([file, "--settings", settings])],
];

// The path a golden names: under testdata/corpus, or own-<version>/ for --gen's sessions.
const corpusPath = (file) => (args.gen && file.startsWith(`${resolve(args.gen)}/`) ? `own-${PI_VERSION}/${file.slice(resolve(args.gen).length + 1)}` : relative(corpus, file));

async function goldensOf(name, file) {
	const out = {};
	for (const [kind, run] of runs(file)) {
		try {
			const { result } = await run();
			result.file = corpusPath(file);
			out[`${name}.${kind}.json`] = `${JSON.stringify(result)}\n`;
		} catch (err) {
			if (!(err instanceof HarnessError) || err.exitCode !== 2) throw new Error(`${name} ${kind}: ${err.stack ?? err}`);
			const msg = err.message.replaceAll(file, corpusPath(file));
			return { [`${name}.error.json`]: `${JSON.stringify({ piVersion: PI_VERSION, file: corpusPath(file), exitCode: 2, error: msg })}\n` };
		}
	}
	return out;
}

const args = parseArgs(process.argv.slice(2), { booleans: ["check"], values: ["only", "out", "gen"] });
if (args.out && args.check) {
	console.error("goldens: --out and --check do not go together");
	process.exit(64);
}
if (args.only && !args.check && !args.out) {
	console.error("goldens: --only goes with --check or --out (the store of a pinned release is rewritten whole)");
	process.exit(64);
}
const expected = join(root, "testdata/expected");
const dir = args.out ? resolve(args.out) : join(expected, PI_VERSION);
// A pinned release's goldens go into the golden store (lib/store.mjs: only what differs from
// the pinned release before it); --out writes every golden as it is.
const store = args.out ? null : goldenStore(expected, PI_VERSION, { check: args.check, prev: previousPinned(here, PI_VERSION) });
let passed = 0;
let failed = 0;
const want = new Set();
for (const [name, file] of corpusFiles(args.gen && resolve(args.gen))) {
	if (args.only && !name.includes(args.only)) continue;
	const goldens = await goldensOf(name, file);
	for (const [g, text] of Object.entries(goldens)) {
		want.add(g);
		if (store) {
			store.put(g, text);
			continue;
		}
		mkdirSync(dir, { recursive: true });
		writeFileSync(join(dir, g), text);
	}
}
if (store) {
	const r = store.finish({ partial: Boolean(args.only) });
	passed += r.passed;
	failed += r.failed;
	for (const l of r.lines) console.log(`${l} (interop/pi/pi goldens rewrites it)`);
	if (!args.check) console.log(`Pi ${PI_VERSION}: ${r.stored} of ${r.total} goldens stored in testdata/expected/${PI_VERSION}/, the rest the same as an earlier pinned release's`);
}
if (args.check && !args.only) {
	// The generated corpus, where the release has one committed: regenerating gives the
	// committed bytes.
	const committed = join(corpus, `gen-${PI_VERSION}`);
	const tmp = existsSync(committed) && mkdtempSync(join(tmpdir(), "compactor-gen-check-"));
	if (tmp)
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
} else if (!store) console.log(`wrote ${want.size} goldens of Pi ${PI_VERSION} to ${dir}`);
