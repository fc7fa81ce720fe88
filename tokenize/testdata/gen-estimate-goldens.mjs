// gen-estimate-goldens.mjs writes estimate-goldens/<version>.json: the real Pi's estimateTokens
// for every path entry of the corpus, as the harness prints it (`interop/pi/pi cut --per-entry`,
// run in this process): Pi 0.73 counts each message entry's message (null for other entries);
// Pi 1.x counts what each entry puts into its projection (context edits applied, a compaction's
// systemMessage checkpoint, custom messages and branch summaries; null for an entry that puts
// nothing there, such as one a context edit omits or one before the latest compaction's kept
// part). For a file with branches it runs once per leaf, so entries off the current path are
// covered. v1/v2 files get random ids on Pi's migration, so only their default path is recorded
// and the test compares it by position.
//
// Inputs: testdata/corpus/*.jsonl, the pi-generated/ and pi-repo/ sessions, the generated
// corpus of the selected Pi (gen-<version>/, not the x-* byte edits, which test loaders) and the
// edge-case sessions of package summarize (summarize/testdata/corpus/edge-*.jsonl).
//
//   PI_VERSION=1.6.0 interop/pi/pi exec tokenize/testdata/gen-estimate-goldens.mjs [--check]
//
// --check rewrites nothing: it compares the file with what the live Pi gives (exit 1 if not
// the same bytes). `make goldens` and `make interop` run it for every Pi of the matrix.
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, dirname, join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const lib = (m) => import(pathToFileURL(join(process.env.PI_HARNESS_ROOT, "lib", m)).href);
const { PI_VERSION, PROJECTED } = await lib("pi.mjs");
const { cutReport } = await lib("cut.mjs");

const corpus = join(here, "..", "..", "testdata", "corpus");
const named = [
	...readdirSync(corpus)
		.filter((f) => f.endsWith(".jsonl"))
		.sort()
		.map((f) => [f, join(corpus, f)]),
	...["pi-generated/synthetic-v3-session.jsonl", "pi-generated/before-compaction.migrated-v3.jsonl", "pi-repo/before-compaction.jsonl", "pi-repo/large-session.jsonl"].map((f) => [
		basename(f),
		join(corpus, f),
	]),
];
const gen = join(corpus, `gen-${PI_VERSION}`);
if (existsSync(gen))
	for (const f of readdirSync(gen).sort()) if (f.endsWith(".jsonl") && !f.startsWith("x-")) named.push([`gen-${PI_VERSION}/${f}`, join(gen, f)]);
// The summarize package's edge-case sessions (edge-pi1-*: Pi >= 1.x only), named by their path
// from testdata/corpus.
const edges = join(here, "..", "..", "summarize", "testdata", "corpus");
for (const f of readdirSync(edges).sort())
	if (f.startsWith("edge-") && f.endsWith(".jsonl") && (PROJECTED || !f.startsWith("edge-pi1-"))) named.push([relative(corpus, join(edges, f)), join(edges, f)]);

const out = {};
for (const [name, file] of named) {
	const lines = readFileSync(file, "utf8")
		.trim()
		.split("\n")
		.flatMap((l) => {
			try {
				return [JSON.parse(l)];
			} catch {
				return [];
			}
		});
	const version = lines[0].version ?? 1;
	const entries = lines.slice(1).filter((e) => e.type !== "session");
	let leaves = [null];
	if (version >= 3) {
		const parents = new Set(entries.map((e) => e.parentId));
		leaves = entries.filter((e) => !parents.has(e.id)).map((e) => e.id);
	}
	const paths = [];
	for (const leaf of leaves) {
		const args = [file, "--per-entry"];
		if (leaf) args.push("--leaf", leaf);
		const { result } = await cutReport(args);
		paths.push({ leaf: leaf ?? "", entries: result.perEntry.map((p) => [p.id, p.type, p.tokens]) });
	}
	out[name] = { version, paths };
}

const target = join(here, "estimate-goldens", `${PI_VERSION}.json`);
const text = `${JSON.stringify(out)}\n`;
if (!process.argv.includes("--check")) {
	mkdirSync(dirname(target), { recursive: true });
	writeFileSync(target, text);
	console.log(`estimate-goldens/${PI_VERSION}.json: ${Object.keys(out).length} files`);
} else if (existsSync(target) && readFileSync(target, "utf8") === text) {
	console.log(`estimate goldens of Pi ${PI_VERSION}: 1 passed, 0 failed`);
} else {
	console.log(`FAIL tokenize/testdata/estimate-goldens/${PI_VERSION}.json: ${existsSync(target) ? "differs from the live Pi" : "missing"} (regenerate: PI_VERSION=${PI_VERSION} interop/pi/pi exec tokenize/testdata/gen-estimate-goldens.mjs)`);
	console.log(`estimate goldens of Pi ${PI_VERSION}: 0 passed, 1 failed`);
	process.exitCode = 1;
}
