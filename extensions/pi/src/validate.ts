// Deciding whether a prepared summary from compactor may stand in for Pi's own compaction of
// the branch Pi is compacting now. Pi appends whatever session_before_compact returns without
// checking it, so every rule that keeps the result equal in meaning to Pi's own compaction is
// checked here, against the branch entries Pi hands to the hook:
//
//   - the value is for this session, and was made with the same custom instructions;
//   - its leaf and its firstKeptEntryId are on this branch, the cut at or before the leaf,
//     never on a tool result (which would orphan it from its tool call);
//   - it builds on the same previous compaction (the latest one on the branch, or none);
//   - the entries it summarized are exactly those Pi would summarize for that cut: from the
//     previous compaction's kept boundary up to the cut, compaction entries and entries that
//     yield no message left out;
//   - the context it leaves (summary + everything kept up to the current leaf, by Pi's own
//     estimate) fits under Pi's threshold, contextWindow - reserveTokens.
//
// This module has no runtime dependency on Pi: Pi's estimateTokens is passed in.

import type { SessionEntry, SessionMessageEntry } from "@mariozechner/pi-coding-agent";

/** Pi's AgentMessage, named through the entry type that carries it. */
export type AgentMessage = SessionMessageEntry["message"];

/** The value compactor writes in COMPACTOR_PREPARED (version 1). Only checked fields are typed strictly. */
export interface PreparedValue {
	v: 1;
	store: string;
	path: string;
	sessionId: string;
	leafId: string;
	firstKeptEntryId: string;
	previousCompactionId: string | null;
	boundaryStartEntryId?: string | null;
	summarizedEntryIds: string[];
	tokensBefore?: number;
	summary: string;
	details: { readFiles: string[]; modifiedFiles: string[] };
	keptTokensEstimate?: number;
	summaryTokensEstimate?: number;
	policy?: string;
	counter?: string;
	settings?: { keepRecentTokens?: number; reserveTokens?: number; contextWindow?: number };
	customInstructions?: string;
	createdAt?: string;
	llmInputTokens?: number;
	incremental?: boolean;
	basedOnLeafId?: string | null;
}

/** What the hook returns to Pi. details keeps Pi's own shape: the file lists at its top level. */
export interface PreparedCompaction {
	summary: string;
	firstKeptEntryId: string;
	tokensBefore: number;
	details: { readFiles: string[]; modifiedFiles: string[] };
}

export type Estimator = (message: AgentMessage) => number;

export interface CheckInput {
	/** The parsed KV value (anything: it is checked here). */
	value: unknown;
	sessionId: string;
	store: string;
	/** event.branchEntries: the current path, root first, the leaf last. */
	branchEntries: SessionEntry[];
	/** event.customInstructions. */
	customInstructions: string | undefined;
	/** The model's context window (ctx.model.contextWindow). */
	contextWindow: number | undefined;
	/** preparation.settings.reserveTokens. */
	reserveTokens: number;
	/** preparation.tokensBefore: Pi's count now (the session grew since the preparation). */
	tokensBefore: number;
	estimate: Estimator;
}

/** Why a value was refused. "malformed" and "other-session" are not about staleness. */
export type Refusal =
	| "malformed"
	| "other-session"
	| "instructions"
	| "leaf-off-branch"
	| "cut-off-branch"
	| "cut-after-leaf"
	| "cut-before-boundary"
	| "cut-on-tool-result"
	| "previous-compaction"
	| "entries-differ"
	| "no-window"
	| "too-big";

export type CheckResult =
	| { ok: true; compaction: PreparedCompaction; summaryTokens: number; keptTokens: number; threshold: number }
	| { ok: false; refusal: Refusal; detail: string };

const refuse = (refusal: Refusal, detail: string): CheckResult => ({ ok: false, refusal, detail });

/** checkPrepared applies every rule above; it never throws. */
export function checkPrepared(input: CheckInput): CheckResult {
	const v = parseValue(input.value);
	if (typeof v === "string") return refuse("malformed", v);
	if (v.sessionId !== input.sessionId || v.store !== input.store) {
		return refuse("other-session", `value is for ${v.store}/${v.sessionId}`);
	}
	const wanted = normInstructions(input.customInstructions);
	const prepared = normInstructions(v.customInstructions);
	if (wanted !== prepared) {
		return refuse("instructions", `prepared with ${JSON.stringify(prepared)}, asked ${JSON.stringify(wanted)}`);
	}

	const path = input.branchEntries;
	const index = new Map<string, number>();
	path.forEach((e, i) => index.set(e.id, i));
	const leafIdx = index.get(v.leafId);
	if (leafIdx === undefined) return refuse("leaf-off-branch", `leaf ${v.leafId} is not on the branch`);
	const cutIdx = index.get(v.firstKeptEntryId);
	if (cutIdx === undefined) return refuse("cut-off-branch", `firstKeptEntryId ${v.firstKeptEntryId} is not on the branch`);
	if (cutIdx > leafIdx) return refuse("cut-after-leaf", `firstKeptEntryId ${v.firstKeptEntryId} comes after leaf ${v.leafId}`);
	const cut = path[cutIdx];
	if (cut.type === "message" && cut.message.role === "toolResult") {
		return refuse("cut-on-tool-result", `firstKeptEntryId ${cut.id} is a tool result`);
	}

	const prevIdx = lastCompactionIndex(path);
	const prevId = prevIdx >= 0 ? path[prevIdx].id : null;
	if (prevId !== v.previousCompactionId) {
		return refuse("previous-compaction", `branch has ${prevId ?? "no compaction"}, value builds on ${v.previousCompactionId ?? "none"}`);
	}
	const boundary = boundaryStart(path, prevIdx, index);
	if (cutIdx < boundary) {
		return refuse("cut-before-boundary", `firstKeptEntryId ${cut.id} lies before the previous compaction's kept boundary`);
	}
	const expected = summarizedIds(path, boundary, cutIdx);
	const diff = firstDifference(expected, v.summarizedEntryIds);
	if (diff !== undefined) return refuse("entries-differ", diff);

	const window = input.contextWindow ?? 0;
	if (!(window > 0)) return refuse("no-window", "the model's context window is unknown");
	const threshold = window - input.reserveTokens;
	const summaryTokens = Math.max(
		input.estimate({ role: "compactionSummary", summary: v.summary, tokensBefore: input.tokensBefore, timestamp: 0 } as AgentMessage),
		v.summaryTokensEstimate ?? 0,
	);
	let keptTokens = 0;
	for (let i = cutIdx; i < path.length; i++) {
		const m = contextMessage(path[i]);
		if (m) keptTokens += input.estimate(m);
	}
	if (summaryTokens + keptTokens > threshold) {
		return refuse("too-big", `summary ${summaryTokens} + kept ${keptTokens} tokens > ${threshold} (window ${window} - reserve ${input.reserveTokens})`);
	}
	return {
		ok: true,
		compaction: {
			summary: v.summary,
			firstKeptEntryId: v.firstKeptEntryId,
			tokensBefore: input.tokensBefore,
			details: { readFiles: [...v.details.readFiles], modifiedFiles: [...v.details.modifiedFiles] },
		},
		summaryTokens,
		keptTokens,
		threshold,
	};
}

function normInstructions(s: string | undefined): string {
	return (s ?? "").trim();
}

/** lastCompactionIndex is the index of the latest compaction entry on the path, or -1. */
export function lastCompactionIndex(path: SessionEntry[]): number {
	for (let i = path.length - 1; i >= 0; i--) if (path[i].type === "compaction") return i;
	return -1;
}

/**
 * boundaryStart is where Pi starts summarizing: the previous compaction's firstKeptEntryId
 * if it is on the path, else the entry after that compaction; the start with no compaction.
 */
function boundaryStart(path: SessionEntry[], prevIdx: number, index: Map<string, number>): number {
	if (prevIdx < 0) return 0;
	const prev = path[prevIdx];
	if (prev.type !== "compaction") return 0;
	return index.get(prev.firstKeptEntryId) ?? prevIdx + 1;
}

/** summarizedIds lists, in path order, the entries in [from, to) whose message Pi would summarize. */
export function summarizedIds(path: SessionEntry[], from: number, to: number): string[] {
	const ids: string[] = [];
	for (let i = from; i < to; i++) {
		const t = path[i].type;
		// As Pi's compaction: messages, custom messages and branch summaries (even empty ones)
		// are summarized; compaction entries never are; other entry types yield no message.
		if (t === "message" || t === "custom_message" || t === "branch_summary") ids.push(path[i].id);
	}
	return ids;
}

/**
 * contextMessage is the message an entry contributes to the context Pi rebuilds after a
 * compaction (buildSessionContext): messages as they are, custom messages, branch summaries
 * with a non-empty summary; nothing for other entries (older compactions included).
 */
function contextMessage(e: SessionEntry): AgentMessage | undefined {
	switch (e.type) {
		case "message":
			return e.message;
		case "custom_message":
			return {
				role: "custom",
				customType: e.customType,
				content: e.content,
				display: e.display,
				details: e.details,
				timestamp: Date.parse(e.timestamp),
			} as AgentMessage;
		case "branch_summary":
			return e.summary ? ({ role: "branchSummary", summary: e.summary, fromId: e.fromId, timestamp: Date.parse(e.timestamp) } as AgentMessage) : undefined;
		default:
			return undefined;
	}
}

function firstDifference(want: string[], got: string[]): string | undefined {
	const n = Math.max(want.length, got.length);
	for (let i = 0; i < n; i++) {
		if (want[i] !== got[i]) {
			return `summarized entry #${i}: branch has ${want[i] ?? "(end)"}, value has ${got[i] ?? "(end)"} (${want.length} vs ${got.length} entries)`;
		}
	}
	return undefined;
}

const isStr = (x: unknown): x is string => typeof x === "string";
const isStrArray = (x: unknown): x is string[] => Array.isArray(x) && x.every(isStr);

/** parseValue checks the shape of a KV value; it returns the value, or what is wrong with it. */
export function parseValue(raw: unknown): PreparedValue | string {
	if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return "value is not a JSON object";
	const o = raw as Record<string, unknown>;
	if (o.v !== 1) return `unsupported version v=${JSON.stringify(o.v)}`;
	for (const k of ["store", "sessionId", "leafId", "firstKeptEntryId", "summary"] as const) {
		if (!isStr(o[k]) || o[k] === "") return `${k} is missing or not a string`;
	}
	if (!(o.previousCompactionId === null || isStr(o.previousCompactionId))) return "previousCompactionId is not null or a string";
	if (!isStrArray(o.summarizedEntryIds)) return "summarizedEntryIds is not an array of strings";
	const d = o.details as Record<string, unknown> | null | undefined;
	if (typeof d !== "object" || d === null || !isStrArray(d.readFiles) || !isStrArray(d.modifiedFiles)) {
		return "details is not {readFiles: string[], modifiedFiles: string[]}";
	}
	if (o.customInstructions !== undefined && o.customInstructions !== null && !isStr(o.customInstructions)) {
		return "customInstructions is not a string";
	}
	if (o.summaryTokensEstimate !== undefined && typeof o.summaryTokensEstimate !== "number") return "summaryTokensEstimate is not a number";
	return o as unknown as PreparedValue;
}
