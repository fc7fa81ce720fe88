// The extension's code stays in small functions: none over 80 lines (from its first line to
// its closing brace, arrow functions and function expressions included), as in compactor's Go.

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import ts from "typescript";
import { EXT_DIR } from "./harness/nats.ts";

const MAX_LINES = 80;

/** functionLengths lists every function of a source file with its length in lines. */
function functionLengths(file: string): Array<{ where: string; lines: number }> {
	const src = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
	const out: Array<{ where: string; lines: number }> = [];
	const visit = (n: ts.Node) => {
		if (ts.isFunctionLike(n) && "body" in n && n.body) {
			const first = src.getLineAndCharacterOfPosition(n.getStart(src)).line;
			const last = src.getLineAndCharacterOfPosition(n.getEnd()).line;
			out.push({ where: `${file}:${first + 1}`, lines: last - first + 1 });
		}
		ts.forEachChild(n, visit);
	};
	visit(src);
	return out;
}

test(`no function of the extension is over ${MAX_LINES} lines`, () => {
	const files = [join(EXT_DIR, "index.ts"), ...readdirSync(join(EXT_DIR, "src")).filter((f) => f.endsWith(".ts")).map((f) => join(EXT_DIR, "src", f))];
	const all = files.flatMap(functionLengths);
	assert.ok(all.length > 100, `found ${all.length} functions: the walk sees them`);
	assert.deepEqual(all.filter((f) => f.lines > MAX_LINES), []);
});
