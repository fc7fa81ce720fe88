// What the extension holds between Pi's events: the configuration, its one connection to
// compactor, and the session it is bound to (where compactor finds it, the agent's pace, the
// compaction cycle, the preparation in flight). Pi's session_start binds it and
// session_compact starts a new cycle; the other modules read and move it.

import type { ExtensionContext, SessionEntry } from "@earendil-works/pi-coding-agent";
import { CompactorClient, withDeadline } from "./client.ts";
import { agentInboxPrefix, type Config, describeNats, type FlagValues, loadConfig, type PiCompactionSettings, readPiCompactionSettings } from "./config.ts";
import { contextEntries, contextTokens } from "./context.ts";
import { errText, failureText, type Log, secs, setStoreNames, silent, stderrLog } from "./debug.ts";
import { contextKind, entryMessages, estimate, host, project } from "./host.ts";
import { locateSession, type ResultEvent, type SessionLocation } from "./session.ts";
import { type Cycle, type InFlight, Pace } from "./trigger.ts";
import { lastCompactionIndex } from "./validate.ts";

/** How a session learns of landings: its events, or (refused) the bucket. */
export type Landing = { by: "events"; sub: { stop(): void }; recent: Map<number, ResultEvent> } | { by: "poll" };

/** What the extension keeps about the session it is bound to. */
export interface SessionState {
	file: string;
	sessionId: string;
	location: SessionLocation | undefined;
	piSettings: PiCompactionSettings;
	pace: Pace;
	cycle: Cycle;
	inFlight: InFlight | undefined;
	asking: boolean;
	polling: boolean;
	lastPollAt: number;
	/** A poll put off (one a second at most, or one still running): it runs when it may. */
	pollTimer: ReturnType<typeof setTimeout> | undefined;
	/** How a preparation's landing is learnt (undefined until the first request). */
	landing: Landing | undefined;
	/** The last decision logged (digits left out), so that the log says each reason once in a row. */
	lastWhy: string;
	/** When the current cycle began (performance.now()). */
	cycleStartedAt: number;
	/** How long the last complete cycle took (from one compaction to the next), in ms. */
	lastCycleMs: number | undefined;
	/** The session's hooks by "result/reason". */
	counts: Record<string, number>;
}

/** Runtime is everything the extension's handlers share; index.ts owns the one instance. */
export interface Runtime {
	cfg: Config | undefined;
	client: CompactorClient | undefined;
	/** The session bound at session_start (undefined: disabled, not persisted, or shut down). */
	state: SessionState | undefined;
	log: Log;
}

export function newRuntime(): Runtime {
	return { cfg: undefined, client: undefined, state: undefined, log: silent };
}

/** location resolves (once the file exists) and caches where compactor finds this session. */
export async function location(rt: Runtime, st: SessionState): Promise<SessionLocation | undefined> {
	if (!st.location && rt.cfg) {
		st.location = await locateSession(st.file, st.sessionId, rt.cfg.stores);
		if (st.location) rt.log(`session ${st.sessionId}: store ${st.location.store}, path ${st.location.path}`);
	}
	return st.location;
}

/** latestCompactionId is the id of the branch's latest compaction (null: none): the cycle's name. */
export function latestCompactionId(path: SessionEntry[]): string | null {
	const i = lastCompactionIndex(path);
	return i >= 0 ? path[i].id : null;
}

/**
 * bindSession (session_start) reads the configuration and binds the extension to the session
 * Pi starts, or to none (disabled, or a session that is not persisted).
 */
export function bindSession(rt: Runtime, ctx: ExtensionContext, flags: () => FlagValues): void {
	try {
		stopFollowing(rt.state);
		const agentDir = host.getAgentDir();
		const cfg = loadConfig(process.env, agentDir, flags());
		rt.cfg = cfg;
		if (cfg.debug) rt.log = stderrLog;
		for (const p of cfg.problems) rt.log(`config: ${p}`);
		const file = ctx.sessionManager.getSessionFile();
		if (!cfg.enabled || !file) {
			rt.log(!cfg.enabled ? "disabled" : "session is not persisted; nothing to prepare");
			rt.state = undefined;
			return;
		}
		rt.state = newSessionState(file, ctx, cfg, agentDir);
		setStoreNames(cfg.stores.map((s) => s.name));
		// Replies come to this store's agent inbox, the one `compactor auth` permits it.
		rt.client ??= new CompactorClient({ ...cfg.nats, inboxPrefix: cfg.nats.inboxPrefix ?? agentInboxPrefix(cfg.stores) });
		rt.log(
			`active in Pi ${host.VERSION ?? "(version unknown)"}${contextKind()}: nats ${describeNats(cfg.nats)}, stores ${cfg.stores.map((s) => s.name).join(",")}, ` +
				`start ${cfg.prepareFraction}, step ${cfg.prepareStep}, deadline ${cfg.deadlineMs} ms, extract ${cfg.extract ? `on (${cfg.extractDeadlineMs} ms)` : "off"}`,
		);
	} catch (err) {
		rt.state = undefined;
		rt.log(`session_start: ${errText(err)}`);
	}
}

function newSessionState(file: string, ctx: ExtensionContext, cfg: Config, agentDir: string): SessionState {
	return {
		file,
		sessionId: ctx.sessionManager.getSessionId(),
		location: undefined,
		piSettings: readPiCompactionSettings(ctx.cwd, agentDir),
		pace: new Pace(cfg.prepareLatencyMs),
		cycle: { compactionId: latestCompactionId(ctx.sessionManager.getBranch()), asks: 0 },
		inFlight: undefined,
		asking: false,
		polling: false,
		lastPollAt: -Infinity,
		pollTimer: undefined,
		landing: undefined,
		lastWhy: "",
		cycleStartedAt: performance.now(),
		lastCycleMs: undefined,
		counts: {},
	};
}

/** compacted (session_compact): the branch has a new compaction, and a new cycle starts. */
export function compacted(rt: Runtime, event: unknown, ctx: ExtensionContext): void {
	try {
		const st = rt.state;
		if (!st) return;
		const ev = event as { compactionEntry?: { id?: string }; fromExtension?: boolean; reason?: string; willRetry?: boolean };
		const path = ctx.sessionManager.getBranch();
		const now = performance.now();
		const after = contextTokens(contextEntries(path, project, entryMessages), estimate);
		st.pace.compacted(after, now);
		const was = st.cycle;
		st.cycle = { compactionId: ev.compactionEntry?.id ?? latestCompactionId(path), asks: 0 };
		rt.log(
			`session_compact (${ev.reason ?? "reason unknown"}${ev.willRetry ? ", will retry" : ""}, ${ev.fromExtension ? "from this extension" : "Pi's own summary"}): ` +
				`the cycle took ${secs(now - st.cycleStartedAt)} with ${was.asks} request(s); the context is now about ${after} tokens`,
		);
		// The first cycle of a session (or of this Pi process) starts anywhere: only complete cycles count.
		if (st.cycleStartedAt !== undefined && was.compactionId !== null) st.lastCycleMs = now - st.cycleStartedAt;
		st.cycleStartedAt = now;
	} catch (err) {
		rt.log(`session_compact: ${errText(err)}`);
	}
}

/** shutdown (session_shutdown) unbinds the session and closes the connection, bounded. */
export async function shutdown(rt: Runtime): Promise<void> {
	const cl = rt.client;
	rt.client = undefined;
	stopFollowing(rt.state);
	rt.state = undefined;
	if (!cl) return;
	// Bounded: shutting down must not hang on an unreachable server.
	const r = await withDeadline(cl.close(), 1000);
	if (!r.ok) rt.log(`close: ${failureText(r)}`);
}

/** stopFollowing ends what the session follows: its events, and a poll put off. */
export function stopFollowing(st: SessionState | undefined): void {
	if (st?.pollTimer) clearTimeout(st.pollTimer);
	if (st?.landing?.by === "events") st.landing.sub.stop();
}
