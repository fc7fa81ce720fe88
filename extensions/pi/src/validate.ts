// Deciding whether a prepared summary from compactor may stand in for Pi's own compaction of
// the branch Pi is compacting now. Pi appends whatever session_before_compact returns without
// checking it, so every rule that keeps the result equal in meaning to Pi's own compaction is
// checked here, against the branch entries Pi hands to the hook:
//
//   - the value is for this session, and was made with the same custom instructions, by the
//     rules of this Pi release (its piVersion, when it says one: a summary request is not
//     the same in every release);
//   - its leaf and its firstKeptEntryId are on this branch, the cut at or before the leaf,
//     never on a tool result (which would orphan it from its tool call);
//   - it builds on the same previous compaction (the latest one on the branch, or none);
//   - the entries it summarized are exactly those Pi would summarize for that cut: from the
//     previous compaction's kept boundary up to the cut, compaction entries and entries that
//     yield no message left out (from Pi 0.80.4 what each entry puts into the context, and from
//     0.86 without system messages, which are never summarized; from 0.87 on its projection,
//     where context edits omit or replace messages); and when the cut is Pi's own, as many
//     messages as Pi's own preparation (the hook's event) summarizes;
//   - the context it leaves (summary + everything kept up to the current leaf, by Pi's own
//     estimate, and from 0.86 the system messages Pi folds into the compaction's checkpoint)
//     fits under Pi's threshold, contextWindow - reserveTokens.
//
// This module has no runtime dependency on Pi: Pi's estimateTokens (and its
// buildSessionProjection, or buildContextEntries and sessionEntryToContextMessages, where
// the host Pi has them) are passed in.

import type { SessionEntry, SessionMessageEntry } from "@earendil-works/pi-coding-agent";
import type * as wire from "./wire.gen.ts";

/** Pi's AgentMessage, named through the entry type that carries it. */
export type AgentMessage = SessionMessageEntry["message"];

/** The fields parseValue requires to be non-empty strings (fields of compactor's engine.Prepared). */
const REQUIRED_STRINGS = ["store", "sessionId", "leafId", "firstKeptEntryId", "summary"] as const satisfies readonly (keyof wire.Prepared)[];

/**
 * The value compactor writes in COMPACTOR_PREPARED (version 1; compactor's engine.Prepared,
 * generated into wire.gen.ts), as parseValue vouches for it: the fields it checks are there
 * and of their type; any other may be missing (a value of an older compactor).
 */
export type PreparedValue = Partial<wire.Prepared> &
	Pick<wire.Prepared, (typeof REQUIRED_STRINGS)[number] | "previousCompactionId"> & {
		v: 1;
		summarizedEntryIds: string[];
		details: { readFiles: string[]; modifiedFiles: string[] };
	};

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
	/** Pi's buildSessionProjection (>= 0.87; undefined before, where Pi builds its context from the path). */
	project?: Project;
	/** Pi 0.80.6 .. 0.86: what each entry puts into the context (undefined with project, or before 0.80.6). */
	entryMessages?: EntryMessages;
	/** Pi's own preparation of this compaction (the hook's event.preparation). */
	preparation?: PiPreparation;
	/** The host Pi's release (its VERSION): a value made for another release is refused. */
	piVersion?: string;
}

/** A context entry as Pi 1.x projects it: the entry and the messages it gives the model. */
export interface ProjectedEntry {
	sourceEntry: SessionEntry;
	messages: AgentMessage[];
}

/** Pi's buildSessionProjection over a path (root first, the leaf last). */
export type Project = (path: SessionEntry[]) => { entries: ProjectedEntry[] };

/**
 * EntryMessages is how Pi 0.80.6 to 0.86 builds its context: the entries of the path that are
 * in it (buildContextEntries), each with the messages it puts there
 * (sessionEntryToContextMessages; an older compaction kept in the range puts its summary there
 * again), and from 0.86 (systemMessages) system messages as prompt state: never summarized,
 * and the ones of the kept range replaced by the compaction's checkpoint.
 */
export interface EntryMessages {
	contextEntries: (path: SessionEntry[]) => SessionEntry[];
	contextMessages: (e: SessionEntry) => AgentMessage[];
	systemMessages: boolean;
}

/** The fields of Pi's CompactionPreparation the checks compare with. */
export interface PiPreparation {
	firstKeptEntryId: string;
	messagesToSummarize: unknown[];
	turnPrefixMessages: unknown[];
}

/** Why a value was refused. "malformed" and "other-session" are not about staleness. */
export type Refusal =
	| "malformed"
	| "other-session"
	| "pi-version"
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
	| { ok: true; compaction: PreparedCompaction; summaryTokens: number; keptTokens: number; systemTokens: number; threshold: number }
	| { ok: false; refusal: Refusal; detail: string };

const refuse = (refusal: Refusal, detail: string): CheckResult => ({ ok: false, refusal, detail });

/** checkPrepared applies every rule above; it never throws. */
export function checkPrepared(input: CheckInput): CheckResult {
	const v = parseValue(input.value);
	if (typeof v === "string") return refuse("malformed", v);
	if (v.sessionId !== input.sessionId || v.store !== input.store) {
		return refuse("other-session", `value is for ${v.store}/${v.sessionId}`);
	}
	if (v.piVersion !== undefined && input.piVersion !== undefined && v.piVersion !== input.piVersion) {
		return refuse("pi-version", `made by the rules of Pi ${v.piVersion}, this is Pi ${input.piVersion}`);
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
	const projection = input.project?.(path);
	if (cut.type === "message" && cut.message.role === "toolResult" && !omitted(projection, cut.id)) {
		return refuse("cut-on-tool-result", `firstKeptEntryId ${cut.id} is a tool result`);
	}

	const prevIdx = lastCompactionIndex(path);
	const prevId = prevIdx >= 0 ? path[prevIdx].id : null;
	if (prevId !== v.previousCompactionId) {
		return refuse("previous-compaction", `branch has ${prevId ?? "no compaction"}, value builds on ${v.previousCompactionId ?? "none"}`);
	}
	const span = projection
		? projectedSpan(projection, v.firstKeptEntryId, input.estimate)
		: rawSpan(path, prevIdx, index, cutIdx, input.estimate, input.entryMessages);
	if (span === undefined) {
		return refuse("cut-before-boundary", `firstKeptEntryId ${cut.id} lies before the previous compaction's kept boundary`);
	}
	const diff = firstDifference(span.summarized, v.summarizedEntryIds);
	if (diff !== undefined) return refuse("entries-differ", diff);
	const pi = input.preparation;
	if (pi && pi.firstKeptEntryId === v.firstKeptEntryId) {
		const piCount = pi.messagesToSummarize.length + pi.turnPrefixMessages.length;
		if (piCount !== span.summarizedMessages) {
			return refuse("entries-differ", `Pi's own preparation summarizes ${piCount} messages at this cut, the branch gives ${span.summarizedMessages}`);
		}
	}

	const window = input.contextWindow ?? 0;
	if (!(window > 0)) return refuse("no-window", "the model's context window is unknown");
	const threshold = window - input.reserveTokens;
	const summaryTokens = Math.max(
		input.estimate({ role: "compactionSummary", summary: v.summary, tokensBefore: input.tokensBefore, timestamp: 0 } as AgentMessage),
		v.summaryTokensEstimate ?? 0,
	);
	const { keptTokens, systemTokens } = span;
	if (summaryTokens + keptTokens + systemTokens > threshold) {
		const sys = systemTokens > 0 ? ` + system ${systemTokens}` : "";
		return refuse("too-big", `summary ${summaryTokens} + kept ${keptTokens}${sys} tokens > ${threshold} (window ${window} - reserve ${input.reserveTokens})`);
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
		systemTokens,
		threshold,
	};
}

/**
 * omitted: in Pi 1.x's projection the entry gives no message (a context edit omits it). Pi
 * 1.x may cut at such a tool result: the model never sees it, so it orphans nothing.
 */
function omitted(projection: { entries: ProjectedEntry[] } | undefined, id: string): boolean {
	const pe = projection?.entries.find((e) => e.sourceEntry.id === id);
	return pe !== undefined && pe.messages.length === 0;
}

/** What a cut means on the branch: the entries and messages it summarizes, what it keeps. */
interface Span {
	summarized: string[];
	summarizedMessages: number;
	keptTokens: number;
	/** Pi 1.x: the system messages Pi folds into the compaction's checkpoint (an upper bound: their sum). */
	systemTokens: number;
}

/**
 * rawSpan is the span of a cut under the rules of Pi before 0.87, which work on the raw path:
 * from the previous compaction's kept boundary to the cut; undefined when the cut lies before
 * it. With em (0.80.6 .. 0.86) an entry is summarized when it puts a message into the context
 * (a compaction never; from 0.86 a system message neither), and what stays is what the kept
 * entries put into the context (an older compaction's summary too; from 0.86 not the kept
 * system messages, which the checkpoint replaces).
 */
function rawSpan(path: SessionEntry[], prevIdx: number, index: Map<string, number>, cutIdx: number, estimate: Estimator, em?: EntryMessages): Span | undefined {
	const boundary = boundaryStart(path, prevIdx, index);
	if (cutIdx < boundary) return undefined;
	if (!em) {
		const summarized = summarizedIds(path, boundary, cutIdx);
		let keptTokens = 0;
		for (let i = cutIdx; i < path.length; i++) {
			const m = contextMessage(path[i]);
			if (m) keptTokens += estimate(m);
		}
		return { summarized, summarizedMessages: summarized.length, keptTokens, systemTokens: 0 };
	}
	const isSystem = (m: AgentMessage | undefined) => em.systemMessages && (m as { role?: string } | undefined)?.role === "system";
	const summarized: string[] = [];
	for (let i = boundary; i < cutIdx; i++) {
		const e = path[i];
		const m = e.type === "compaction" ? undefined : em.contextMessages(e)[0];
		if (m && !isSystem(m)) summarized.push(e.id);
	}
	let keptTokens = 0;
	for (let i = cutIdx; i < path.length; i++) {
		const e = path[i];
		if (e.type === "message" && isSystem(e.message)) continue;
		for (const m of em.contextMessages(e)) keptTokens += estimate(m);
	}
	let systemTokens = 0;
	if (em.systemMessages) for (const e of em.contextEntries(path)) for (const m of em.contextMessages(e)) if (isSystem(m)) systemTokens += estimate(m);
	return { summarized, summarizedMessages: summarized.length, keptTokens, systemTokens };
}

/**
 * projectedSpan is the span of a cut under Pi 1.x's rules, on its projection (as its
 * prepareCompaction): the previous compaction is the projection's first entry, the span runs
 * from the entry after it to the cut, an entry is summarized when it gives a message other
 * than a system message, and what stays is every message from the cut on but the system
 * messages, which Pi folds into the compaction's systemMessage. Undefined when the cut is
 * not in the projection (it lies before the previous compaction's kept boundary).
 */
function projectedSpan(projection: { entries: ProjectedEntry[] }, cutId: string, estimate: Estimator): Span | undefined {
	const entries = projection.entries;
	const cut = entries.findIndex((pe) => pe.sourceEntry.id === cutId);
	const prev = entries.findIndex((pe) => pe.sourceEntry.type === "compaction" && pe.messages.length > 0);
	if (cut < 0 || cut <= prev) return undefined;
	const summarized: string[] = [];
	let summarizedMessages = 0;
	let keptTokens = 0;
	let systemTokens = 0;
	entries.forEach((pe, i) => {
		const conversation = pe.sourceEntry.type === "compaction" ? [] : pe.messages.filter((m) => m.role !== "system");
		for (const m of pe.messages) if (m.role === "system") systemTokens += estimate(m);
		if (i > prev && i < cut && conversation.length > 0) {
			summarized.push(pe.sourceEntry.id);
			summarizedMessages += conversation.length;
		}
		if (i >= cut) for (const m of conversation) keptTokens += estimate(m);
	});
	return { summarized, summarizedMessages, keptTokens, systemTokens };
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
export function contextMessage(e: SessionEntry): AgentMessage | undefined {
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
	for (const k of REQUIRED_STRINGS) {
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
	if (o.piVersion !== undefined && !isStr(o.piVersion)) return "piVersion is not a string";
	return o as unknown as PreparedValue;
}
