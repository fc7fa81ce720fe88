// Pi's own library (the pinned devDependency, same version as the oracle) for the unit tests:
// its SessionManager builds real session entries, and its prepareCompaction (not exported by
// the package entry point, so imported from its module file) says what Pi would summarize.

import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { SessionEntry, SessionManager as SM } from "@mariozechner/pi-coding-agent";

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

const dist = join(EXT_DIR, "node_modules", "@mariozechner", "pi-coding-agent", "dist");
const load = (rel: string) => import(pathToFileURL(join(dist, rel)).href);

const compactionMod = await load("core/compaction/compaction.js");
const utilsMod = await load("core/compaction/utils.js");
const sessionMod = await load("core/session-manager.js");

export const SessionManager = sessionMod.SessionManager as typeof SM;
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
 * message entries by object identity, custom messages and branch summaries (which Pi builds
 * anew) by their content and timestamp. It does not use the extension's own range logic.
 */
export function idsOfPiMessages(path: SessionEntry[], msgs: unknown[]): string[] {
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
