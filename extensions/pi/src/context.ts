// The context Pi builds from a branch, as the trigger needs it: how many tokens Pi would
// summarize if it compacted now, and how big the context is right after a compaction. Pi 1.x
// builds its context from buildSessionProjection (context edits applied, system messages
// folded into compactions), which the host Pi passes in; Pi 0.73 from the raw path, which is
// walked here as its buildSessionContext walks it.

import type { SessionEntry } from "@earendil-works/pi-coding-agent";
import { type AgentMessage, contextMessage, type Estimator, lastCompactionIndex, type Project, type ProjectedEntry } from "./validate.ts";

/** contextEntries is the branch's context, entry by entry, as the host Pi builds it. */
export function contextEntries(path: SessionEntry[], project: Project | undefined): ProjectedEntry[] {
	if (project) return project(path).entries;
	const ci = lastCompactionIndex(path);
	if (ci < 0) return path.map((e) => ({ sourceEntry: e, messages: messagesOf(e) }));
	const c = path[ci];
	const kept = c.type === "compaction" ? path.findIndex((e) => e.id === c.firstKeptEntryId) : -1;
	const summary = c.type === "compaction" ? [{ role: "compactionSummary", summary: c.summary, tokensBefore: c.tokensBefore, timestamp: 0 } as AgentMessage] : [];
	return [
		{ sourceEntry: c, messages: summary },
		...(kept >= 0 && kept < ci ? path.slice(kept, ci) : []).map((e) => ({ sourceEntry: e, messages: messagesOf(e) })),
		...path.slice(ci + 1).map((e) => ({ sourceEntry: e, messages: messagesOf(e) })),
	];
}

function messagesOf(e: SessionEntry): AgentMessage[] {
	if (e.type === "compaction") return [];
	const m = contextMessage(e);
	return m ? [m] : [];
}

/**
 * summarizableTokens is about what Pi would summarize if it compacted the branch now: the
 * conversation after the latest compaction (its summary and the system messages left out)
 * beyond the keepRecentTokens Pi keeps verbatim. Pi's cut lands on a turn boundary near
 * there, so this is an estimate, good enough to tell "nothing yet" from "a span worth a
 * summary".
 */
export function summarizableTokens(entries: ProjectedEntry[], keepRecentTokens: number, estimate: Estimator): number {
	let total = 0;
	for (const pe of entries) {
		if (pe.sourceEntry.type === "compaction") continue;
		for (const m of pe.messages) if (m.role !== "system") total += estimate(m);
	}
	return Math.max(0, total - keepRecentTokens);
}

/** contextTokens is Pi's estimate of the whole context (chars / 4 of every message). */
export function contextTokens(entries: ProjectedEntry[], estimate: Estimator): number {
	let n = 0;
	for (const pe of entries) for (const m of pe.messages) n += estimate(m);
	return n;
}
