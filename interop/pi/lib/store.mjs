// Goldens of several Pi releases without a copy per release: a golden store.
//
// root/<version>/ holds the goldens of a pinned release that differ from those of the pinned
// release before it (interop/pi/versions.txt order), and _index.json, which names, for every
// golden of the release, the release whose directory holds its bytes:
//
//   {"version":"0.78.0","goldens":{"01-minimal.context.json":"0.73.1", ...}}
//
// A golden stored by release H stands for release V with H's number read as V's where it
// names the release (the "piVersion":"H" field and "Pi H" in messages, never a path such as
// gen-H/); two releases' goldens are the same when they are equal read that way. A directory without _index.json holds every golden itself (what
// `goldens --out` writes). internal/pigolden reads the same layout (pigolden.Read).
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export const INDEX = "_index.json";

/** The goldens of `version` under root: name -> text (read as that version), {} when none. */
export function readGoldens(root, version) {
	const dir = join(root, version);
	if (!existsSync(dir)) return {};
	const out = {};
	const indexFile = join(dir, INDEX);
	if (!existsSync(indexFile)) {
		for (const f of readdirSync(dir)) if (f !== INDEX) out[f] = readFileSync(join(dir, f), "utf8");
		return out;
	}
	const index = JSON.parse(readFileSync(indexFile, "utf8"));
	for (const [name, holder] of Object.entries(index.goldens)) out[name] = asVersion(readFileSync(join(root, holder, name), "utf8"), holder, version);
	return out;
}

/** text, stored by release `holder`, read as release `version`. */
export function asVersion(text, holder, version) {
	if (holder === version) return text;
	const h = holder.replaceAll(".", "\\.");
	return text.replaceAll(`"piVersion":"${holder}"`, `"piVersion":"${version}"`).replace(new RegExp(`\\bPi ${h}(?!\\.?[0-9])`, "g"), `Pi ${version}`);
}

/**
 * A writer (or, with check, a checker) of the goldens of `version` under root. `prev` is the
 * pinned release before it (undefined for the first): a golden equal to prev's is not stored
 * again. put(name, text) for every golden, then finish() -> {passed, failed, lines}.
 */
export function goldenStore(root, version, { check = false, prev } = {}) {
	const dir = join(root, version);
	const prevIndex = prev && existsSync(join(root, prev, INDEX)) ? JSON.parse(readFileSync(join(root, prev, INDEX), "utf8")).goldens : {};
	const mine = existsSync(join(dir, INDEX)) ? JSON.parse(readFileSync(join(dir, INDEX), "utf8")).goldens : null;
	const index = {};
	let passed = 0;
	let failed = 0;
	const lines = [];
	const stored = (name, holder) => asVersion(readFileSync(join(root, holder, name), "utf8"), holder, version);
	return {
		put(name, text) {
			if (check) {
				const holder = mine?.[name] ?? (existsSync(join(dir, name)) ? version : null);
				if (holder && existsSync(join(root, holder, name)) && stored(name, holder) === text) passed++;
				else {
					failed++;
					lines.push(`FAIL ${version}/${name}: ${holder ? "differs from the live Pi" : "missing"}`);
				}
				index[name] = true;
				return;
			}
			const holder = prevIndex[name];
			if (holder && existsSync(join(root, holder, name)) && stored(name, holder) === text) {
				index[name] = holder;
				return;
			}
			mkdirSync(dir, { recursive: true });
			writeFileSync(join(dir, name), text);
			index[name] = version;
		},
		/** partial (check only): some goldens were left out on purpose; none is stale. */
		finish({ partial = false } = {}) {
			if (check) {
				if (!partial)
					for (const name of Object.keys(mine ?? (existsSync(dir) ? Object.fromEntries(readdirSync(dir).map((f) => [f, version])) : {})).sort())
					if (!index[name]) {
						failed++;
						lines.push(`FAIL ${version}/${name}: no input makes it (stale)`);
					}
				return { passed, failed, lines };
			}
			mkdirSync(dir, { recursive: true });
			for (const f of readdirSync(dir)) if (f !== INDEX && index[f] !== version) rmSync(join(dir, f));
			const sorted = Object.fromEntries(Object.keys(index).sort().map((k) => [k, index[k]]));
			writeFileSync(join(dir, INDEX), `${JSON.stringify({ version, goldens: sorted }, null, 1)}\n`);
			return { passed, failed, lines, stored: Object.values(index).filter((h) => h === version).length, total: Object.keys(index).length };
		},
	};
}

/** The pinned release before `version` in interop/pi/versions.txt (undefined: none, or not pinned). */
export function previousPinned(harnessRoot, version) {
	const list = readFileSync(join(harnessRoot, "versions.txt"), "utf8")
		.split("\n")
		.map((l) => l.trim())
		.filter((l) => l && !l.startsWith("#"));
	const i = list.indexOf(version);
	return i > 0 ? list[i - 1] : undefined;
}
