// The context Pi builds from a branch, as the trigger needs it: how many tokens Pi would
// summarize if it compacted now, and how big the context is right after a compaction. From
// 0.87 Pi builds its context from buildSessionProjection (context edits applied, system
// messages folded into compactions), from 0.80.6 from buildContextEntries and
// sessionEntryToContextMessages, both of which the host Pi passes in; before, from the raw
// path, which is walked here as its buildSessionContext walks it.

import type { SessionEntry } from "@earendil-works/pi-coding-agent";
import { type AgentMessage, contextMessage, type EntryMessages, type Estimator, lastCompactionIndex, type Project, type ProjectedEntry } from "./validate.ts";

/** contextEntries is the branch's context, entry by entry, as the host Pi builds it. */
export function contextEntries(path: SessionEntry[], project: Project | undefined, em?: EntryMessages): ProjectedEntry[] {
	if (project) return project(path).entries;
	if (em) return em.contextEntries(path).map((e) => ({ sourceEntry: e, messages: em.contextMessages(e) }));
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

/** contextTokens is Pi's estimate of the whole context (chars / 4 of every message). */
export function contextTokens(entries: ProjectedEntry[], estimate: Estimator): number {
	let n = 0;
	for (const pe of entries) for (const m of pe.messages) n += estimate(m);
	return n;
}

/**
 * preparableTokens is what a worker's preparation would summarize if it were asked now (Pi's
 * estimate): the span after the branch's latest compaction up to Pi's cut, where a cut that
 * splits a turn is moved back to the turn's start (the worker summarizes whole turns, so a
 * split turn's prefix is left to the bridge) unless the turn starts the span (then the
 * worker summarizes its prefix). Pi's cut is found as Pi finds it: walking back
 * from the newest entry until keepRecentTokens are reached, then the first cut point (an
 * entry with a message other than a tool result) at or after that entry. When there is none
 * (the agent is in the middle of a turn whose tool results alone fill keepRecentTokens),
 * Pi before 0.86 cuts at the span's first cut point, which leaves nothing to summarize, and
 * from 0.86 at its last (newestFallback). So a request is not made where the worker would find nothing
 * to prepare: with large tool outputs a turn is bigger than keepRecentTokens, and the
 * difference between the context and keepRecentTokens says nothing about what is preparable.
 */
export function preparableTokens(entries: ProjectedEntry[], keepRecentTokens: number, estimate: Estimator, newestFallback: boolean): number {
	const start = entries.length > 0 && entries[0].sourceEntry.type === "compaction" ? 1 : 0;
	const sizes = entries.map((pe) => (pe.sourceEntry.type === "compaction" ? 0 : pe.messages.reduce((n, m) => n + (m.role === "system" ? 0 : estimate(m)), 0)));
	const cutPoints: number[] = [];
	for (let i = start; i < entries.length; i++) if (isCutPoint(entries[i])) cutPoints.push(i);
	if (cutPoints.length === 0) return 0;
	let cut = cutPoints[0];
	let kept = 0;
	for (let i = entries.length - 1; i >= start; i--) {
		kept += sizes[i];
		if (sizes[i] > 0 && kept >= keepRecentTokens) {
			cut = cutPoints.find((c) => c >= i) ?? (newestFallback ? cutPoints[cutPoints.length - 1] : cutPoints[0]);
			break;
		}
	}
	let turnStart = cut;
	while (turnStart > start && !startsTurn(entries[turnStart])) turnStart--;
	const history = sum(sizes, start, turnStart);
	// A split turn with nothing before it in the span (a system message is not summarized):
	// the worker keeps Pi's cut and prepares the turn's prefix.
	return history > 0 ? history : sum(sizes, start, cut);
}

function sum(sizes: number[], from: number, to: number): number {
	let n = 0;
	for (let i = from; i < to; i++) n += sizes[i];
	return n;
}

function isCutPoint(pe: ProjectedEntry): boolean {
	return pe.sourceEntry.type !== "compaction" && pe.messages.some((m) => m.role !== "toolResult" && m.role !== "system");
}

/** startsTurn: the entry opens a turn (a user's message, or what Pi counts as one). */
function startsTurn(pe: ProjectedEntry): boolean {
	return pe.sourceEntry.type !== "compaction" && pe.messages.some((m) => m.role === "user" || m.role === "bashExecution" || m.role === "custom" || m.role === "branchSummary");
}
