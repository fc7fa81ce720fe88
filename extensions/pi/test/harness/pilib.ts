// Pi's own library for the unit tests: the Pi of $PI_PACKAGE_DIR (`make test-extension` sets it
// to the harness's install of $PI_VERSION, 0.73.1 or 1.6.0), else the pinned devDependency
// (1.6.0). Its SessionManager builds real session entries, and its prepareCompaction (not
// exported by the package entry point, so imported from its module file) says what Pi would
// summarize. Only dist/core modules are loaded: they run on the machine's Node 20 (Pi 1.6's
// entry point and CLI need Node 22).

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { pathToFileURL } from "node:url";
import type { SessionEntry, SessionManager as SM } from "@earendil-works/pi-coding-agent";

/** The fields of Pi's CompactionPreparation the tests use (the type is not exported by the entry point). */
export interface CompactionPreparation {
	firstKeptEntryId: string;
	messagesToSummarize: unknown[];
	turnPrefixMessages: unknown[];
	isSplitTurn: boolean;
	tokensBefore: number;
	fileOps: { read: Set<string>; written: Set<string>; edited: Set<string> };
}
import { EXT_DIR } from "./nats.ts";

const pkgDir = process.env.PI_PACKAGE_DIR || join(EXT_DIR, "node_modules", "@earendil-works", "pi-coding-agent");
const dist = join(pkgDir, "dist");
const load = (rel: string) => import(pathToFileURL(join(dist, rel)).href);

/** The version of the Pi whose library the tests use. */
export const PI_LIB_VERSION = (JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")) as { version: string }).version;

const compactionMod = await load("core/compaction/compaction.js");
const utilsMod = await load("core/compaction/utils.js");
const sessionMod = await load("core/session-manager.js");

export const SessionManager = sessionMod.SessionManager as typeof SM;
/** Pi 1.x's buildSessionProjection; undefined in Pi 0.73. */
export const buildSessionProjection = sessionMod.buildSessionProjection as
	| ((path: SessionEntry[]) => { entries: Array<{ sourceEntry: SessionEntry; messages: unknown[] }> })
	| undefined;
/** Pi's buildContextEntries and sessionEntryToContextMessages (>= 0.80.6); undefined before. */
export const buildContextEntries = sessionMod.buildContextEntries as ((path: SessionEntry[]) => SessionEntry[]) | undefined;
export const sessionEntryToContextMessages = sessionMod.sessionEntryToContextMessages as ((e: SessionEntry) => unknown[]) | undefined;
export const estimateTokens = compactionMod.estimateTokens as (m: unknown) => number;
export const prepareCompaction = compactionMod.prepareCompaction as (
	path: SessionEntry[],
	settings: { enabled: boolean; reserveTokens: number; keepRecentTokens: number },
) => CompactionPreparation | undefined;
export const computeFileLists = utilsMod.computeFileLists as (ops: CompactionPreparation["fileOps"]) => {
	readFiles: string[];
	modifiedFiles: string[];
};

/**
 * idsOfPiMessages maps the messages of Pi's preparation back to the entries they came from:
 * in Pi 1.x through its own projection (the entry each projected message comes from, matched
 * by value, in order); in Pi 0.73 message entries by object identity, custom messages and
 * branch summaries (which Pi builds anew) by their content and timestamp. It does not use
 * the extension's own range logic.
 */
export function idsOfPiMessages(path: SessionEntry[], msgs: unknown[]): string[] {
	if (buildSessionProjection) {
		const projected = buildSessionProjection(path).entries.flatMap((pe) => pe.messages.map((m) => ({ id: pe.sourceEntry.id, m })));
		let k = 0;
		const ids: string[] = [];
		for (const m of msgs) {
			while (k < projected.length && !(projected[k].m === m || isDeepStrictEqual(projected[k].m, m))) k++;
			if (k === projected.length) throw new Error(`no projected entry for Pi's message ${JSON.stringify(m).slice(0, 120)}`);
			if (ids[ids.length - 1] !== projected[k].id) ids.push(projected[k].id);
			k++;
		}
		return ids;
	}
	const used = new Set<string>();
	return msgs.map((m) => {
		const mm = m as Record<string, unknown>;
		const e = path.find((e) => {
			if (used.has(e.id)) return false;
			if (e.type === "message") return e.message === m;
			if (e.type === "custom_message")
				return mm.role === "custom" && mm.customType === e.customType && mm.content === e.content && mm.timestamp === Date.parse(e.timestamp);
			if (e.type === "branch_summary")
				return mm.role === "branchSummary" && mm.summary === e.summary && mm.fromId === e.fromId && mm.timestamp === Date.parse(e.timestamp);
			return false;
		});
		if (!e) throw new Error(`no entry for Pi's message ${JSON.stringify(m).slice(0, 120)}`);
		used.add(e.id);
		return e.id;
	});
}
