// gen-estimate-goldens.mjs writes estimate-goldens/<version>.json: Pi's own estimateTokens for every
// message entry of the corpus, as printed by the real Pi (`interop/pi/pi cut --per-entry`; Pi 0.73.1:
// 1.x counts the projection, context edits and all context-visible entries included).
// For a file with branches it runs once per leaf, so entries off the current path are covered.
// v1/v2 files get random ids on Pi's migration, so only their default path is recorded and
// the test compares it by position.
//
//   PI_VERSION=0.73.1 node tokenize/testdata/gen-estimate-goldens.mjs interop/pi/pi FILE... > tokenize/testdata/estimate-goldens/0.73.1.json
import { readFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { basename } from "node:path";

const [oracle, ...files] = process.argv.slice(2);
const out = {};
for (const file of files) {
  const lines = readFileSync(file, "utf8").trim().split("\n").flatMap((l) => {
    try { return [JSON.parse(l)]; } catch { return []; }
  });
  const header = lines[0];
  const version = header.version ?? 1;
  const entries = lines.slice(1).filter((e) => e.type !== "session");
  let leaves = [null];
  if (version >= 3) {
    const parents = new Set(entries.map((e) => e.parentId));
    leaves = entries.filter((e) => !parents.has(e.id)).map((e) => e.id);
  }
  const paths = [];
  for (const leaf of leaves) {
    const args = ["cut", file, "--per-entry", "--compact"];
    if (leaf) args.push("--leaf", leaf);
    const res = JSON.parse(execFileSync(oracle, args, { maxBuffer: 1 << 30 }).toString());
    paths.push({ leaf: leaf ?? "", entries: res.perEntry.map((p) => [p.id, p.type, p.tokens]) });
  }
  out[basename(file)] = { version, paths };
}
process.stdout.write(JSON.stringify(out) + "\n");
