// The hook's requests to compactor's workers, and the checks of what comes back: a prepared
// value bridged to Pi's cut (the entries between the two cuts as extractive notes), or the
// extract (the previous summary plus extractive notes, at Pi's cut, without any preparation).
// Every value, read or bridged, is checked against the branch Pi compacts (validate.ts).

import type { ExtensionContext, SessionBeforeCompactEvent } from "@earendil-works/pi-coding-agent";
import { type CompactorClient, withDeadline } from "./client.ts";
import type { Config } from "./config.ts";
import { errText, failureText } from "./debug.ts";
import { entryMessages, estimate, host, project } from "./host.ts";
import { bridgeSubject, type BridgeRequest, type HookReason, type SessionLocation, type ValueMaking, valueMaking } from "./session.ts";
import type { SessionState } from "./state.ts";
import { type CheckResult, checkPrepared } from "./validate.ts";

/** Where the hook runs: the session, where compactor finds it, and Pi's event and context. */
export interface AtHook {
	st: SessionState;
	loc: SessionLocation;
	event: SessionBeforeCompactEvent;
	ctx: ExtensionContext;
}

/** check decides whether value may stand in for Pi's compaction now (and learns Pi's settings from the event). */
export function check(at: AtHook, value: unknown): CheckResult {
	const { st, loc, event, ctx } = at;
	st.piSettings = { ...st.piSettings, ...event.preparation.settings };
	return checkPrepared({
		value,
		sessionId: st.sessionId,
		store: loc.store,
		branchEntries: event.branchEntries,
		customInstructions: event.customInstructions,
		contextWindow: ctx.model?.contextWindow,
		reserveTokens: event.preparation.settings.reserveTokens,
		tokensBefore: event.preparation.tokensBefore,
		estimate,
		project,
		entryMessages,
		preparation: event.preparation,
		piVersion: host.VERSION,
	});
}

/** bridgeRequest asks for the session's preparation at Pi's cut, with Pi's settings at the hook. */
export function bridgeRequest(at: AtHook): BridgeRequest {
	const { st, loc, event, ctx } = at;
	return {
		v: 1,
		store: loc.store,
		path: loc.path,
		sessionId: st.sessionId,
		leafId: ctx.sessionManager.getLeafId() ?? "",
		firstKeptEntryId: event.preparation.firstKeptEntryId,
		...(host.VERSION ? { piVersion: host.VERSION } : {}),
		keepRecentTokens: event.preparation.settings.keepRecentTokens,
		reserveTokens: event.preparation.settings.reserveTokens,
		...(ctx.model?.contextWindow ? { contextWindow: ctx.model.contextWindow } : {}),
	};
}

/**
 * bridgeable: the value was made for this branch (it passes every check, or fails only for
 * its size, which a later cut may fix) and its cut lies before Pi's own.
 */
export function bridgeable(r: CheckResult, value: unknown, event: SessionBeforeCompactEvent): boolean {
	if (!r.ok && r.refusal !== "too-big") return false;
	const cut = (value as { firstKeptEntryId?: unknown }).firstKeptEntryId;
	const ids = event.branchEntries.map((e) => e.id);
	const mine = typeof cut === "string" ? ids.indexOf(cut) : -1;
	const pis = ids.indexOf(event.preparation.firstKeptEntryId);
	return mine >= 0 && pis > mine;
}

/** What a bridge gave: a value that passed the checks, or why none did (text for the debug line). */
export type Bridged =
	| { ok: true; text: string; result: CheckResult & { ok: true }; making: ValueMaking; entries: number }
	| { ok: false; text: string; reasonCode: HookReason };

/** bridgeToPiCut asks a worker to extend the preparation to Pi's cut within leftMs, and checks the answer. */
export async function bridgeToPiCut(cl: CompactorClient, at: AtHook, leftMs: number): Promise<Bridged> {
	const br = await withDeadline(cl.requestBridge(bridgeSubject(at.loc), bridgeRequest(at), leftMs), leftMs, at.event.signal);
	if (!br.ok) return { ok: false, text: `bridge ${failureText(br)}`, reasonCode: br.reason === "timeout" ? "bridge-late" : "bridge-refused" };
	if (br.value.error !== undefined || br.value.prepared === undefined) {
		return { ok: false, text: `bridge refused: ${br.value.error ?? "no value"}`, reasonCode: "bridge-refused" };
	}
	const rb = check(at, br.value.prepared);
	if (!rb.ok) return { ok: false, text: `bridged value refused: ${rb.refusal}: ${rb.detail}`, reasonCode: "bridge-refused" };
	const entries = bridgedEntries(br.value.prepared);
	return { ok: true, text: `bridged ${entries} entries`, result: rb, making: valueMaking(br.value.prepared), entries };
}

/** bridgedEntries is how many messages a bridged value's bridge covered. */
function bridgedEntries(value: unknown): number {
	const b = (value as { bridge?: { messages?: unknown } }).bridge;
	return typeof b?.messages === "number" ? b.messages : 0;
}

/** What the extract gave: text for the debug line, and the checked value when there was one. */
export interface Extracted {
	text: string;
	result?: CheckResult;
	making?: ValueMaking;
}

/** extract asks a worker for the answer made without a model at Pi's cut, and checks it. */
export async function extract(c: Config, cl: CompactorClient, at: AtHook): Promise<Extracted> {
	const req = { ...bridgeRequest(at), extract: true };
	const br = await withDeadline(cl.requestBridge(bridgeSubject(at.loc), req, c.extractDeadlineMs), c.extractDeadlineMs, at.event.signal);
	if (!br.ok) return { text: br.reason === "error" ? `failed: ${errText(br.error)}` : br.reason };
	if (br.value.error !== undefined || br.value.prepared === undefined) return { text: `refused: ${br.value.error ?? "no value"}` };
	const r = check(at, br.value.prepared);
	return {
		text: r.ok ? `used (summary ${r.summaryTokens} + kept ${r.keptTokens} <= ${r.threshold} tokens)` : `refused: ${r.refusal}: ${r.detail}`,
		result: r,
		making: valueMaking(br.value.prepared),
	};
}
