// What each run of the hook leaves behind: a count by "result/reason" for the session, one
// debug line, and one report to compactor on the session's hook subject (which compactor
// counts: compactor_prepared_lookups_total, compactor_prepared_hook_total, ...).

import type { ExtensionContext, SessionBeforeCompactEvent } from "@earendil-works/pi-coding-agent";
import { clock, secs } from "./debug.ts";
import type { HookState } from "./hookstate.ts";
import { estimate } from "./host.ts";
import { type HookReport, hookSubject, type ValueMaking } from "./session.ts";
import type { Runtime, SessionState } from "./state.ts";
import type { AgentMessage } from "./validate.ts";

/** The run's circumstances: how long it took, and Pi's event. */
export interface HookEnd {
	ms: number;
	piReason: string;
	willRetry: boolean;
	event: SessionBeforeCompactEvent;
	ctx: ExtensionContext;
}

/** reportHook counts the run, writes its debug line and publishes its report (when compactor was asked). */
export function reportHook(rt: Runtime, h: HookState, end: HookEnd): void {
	const st = rt.state;
	if (st) {
		const key = `${h.result}/${h.reasonCode}`;
		st.counts[key] = (st.counts[key] ?? 0) + 1;
	}
	// Pi's own summary: a model's, over the span of Pi's own preparation
	const making: ValueMaking = h.result === "pi" ? { spanTokens: { model: piSpanTokens(end.event), extract: 0 } } : h.making;
	rt.log(`session_before_compact: ${h.outcome} [${h.result}/${h.reasonCode}, ${end.piReason}${end.willRetry ? ", will retry" : ""}${h.timing ? `; value ${h.timing}` : ""}${inFlightText(st)}${describeMaking(making)}] in ${end.ms.toFixed(1)} ms`);
	const client = rt.client;
	if (h.kind && h.loc && client && st) client.report(hookSubject(h.loc), hookReport(h, making, st, end));
}

/** hookReport is the report of one run of the hook. */
export function hookReport(h: HookState, making: ValueMaking, st: SessionState, end: HookEnd): HookReport {
	const loc = h.loc as NonNullable<HookState["loc"]>;
	const report: HookReport = {
		v: 1, store: loc.store, sessionId: st.sessionId, outcome: h.kind as HookReport["outcome"], latencyMs: end.ms,
		leafId: end.ctx.sessionManager.getLeafId() ?? undefined, result: h.result, reasonCode: h.reasonCode, piReason: end.piReason, counts: { ...st.counts },
	};
	if (h.kind !== "hit" || h.result !== "prepared") report.reason = h.outcome;
	if (making.spanTokens) report.spanTokens = making.spanTokens;
	if (making.base) report.base = making.base;
	if (making.baseRefused) report.baseRefused = making.baseRefused;
	if (h.bridged !== undefined) {
		report.bridged = true;
		report.bridgedEntries = h.bridged;
	}
	return report;
}

/** inFlightText names the preparation still in flight at the hook, for the debug line. */
function inFlightText(st: SessionState | undefined): string {
	const f = st?.inFlight;
	return f ? `; preparation #${f.nth} requested ${clock(f.requestedAt)}, in flight for ${secs(performance.now() - f.at)}` : "";
}

/** piSpanTokens is the span Pi's own compaction summarizes, by Pi's estimate. */
function piSpanTokens(event: SessionBeforeCompactEvent): number {
	let n = 0;
	try {
		const p = event.preparation as { messagesToSummarize?: AgentMessage[]; turnPrefixMessages?: AgentMessage[] };
		for (const m of [...(p.messagesToSummarize ?? []), ...(p.turnPrefixMessages ?? [])]) n += estimate(m);
	} catch {
		return 0;
	}
	return n;
}

/**
 * describeMaking says in the debug line what the summary Pi got was built on and how much of
 * its span a model read: "; base model (made 07:27:55.1); span 12000 tokens: 0 model, 12000 extract".
 */
export function describeMaking(m: ValueMaking): string {
	let out = "";
	if (m.base) {
		out += `; base ${m.base}`;
		const notes = [];
		if (m.baseMadeAt && m.base === "model") notes.push(`made ${clock(Date.parse(m.baseMadeAt))}`);
		if (m.baseRefused) notes.push(`refused: ${m.baseRefused}`);
		if (m.readAgainTokens) notes.push(`${m.readAgainTokens} tokens of older spans read again`);
		if (m.via) notes.push(`via compaction ${m.via}`);
		if (m.segments) notes.push(`${m.segments} span summaries joined`);
		if (notes.length) out += ` (${notes.join(", ")})`;
	}
	if (m.spanTokens) {
		const { model, extract } = m.spanTokens;
		out += `; span ${model + extract} tokens: ${model} model, ${extract} extract`;
	}
	return out;
}
