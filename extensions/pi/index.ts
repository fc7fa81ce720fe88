// compactor's Pi extension: zero-wait compaction.
//
// While the agent works, compactor prepares the summary in the background; when Pi compacts
// (automatically or by /compact), this extension hands Pi that prepared summary through the
// session_before_compact hook, so Pi skips its own summarizer call and appends the compaction
// itself, from its in-memory leaf. Pi is never made worse: whenever nothing valid is ready
// within a short deadline, or compactor cannot be reached, the hook returns nothing and Pi
// compacts as it always does. Nothing here throws into Pi, shows an error, or writes a file.
//
//   agent_start            a run starts: the pace is measured over working time only
//   turn_end               a preparation due (src/trigger.ts)? -> publish a prepare job
//   session_before_compact fetch the prepared value (bounded); if its cut lies before Pi's,
//                          ask a worker to bridge it to Pi's cut; check it, return it or nothing
//   session_compact        a new cycle starts (the branch has a new compaction)
//   session_shutdown       close the NATS connection
//
// Load it with `pi -e extensions/pi/index.ts`, or install extensions/pi as a Pi package.
// Configuration and the contract with compactor are in README.md beside this file.

import type { ExtensionAPI, ExtensionContext, SessionBeforeCompactEvent, SessionEntry } from "@mariozechner/pi-coding-agent";
import { estimateTokens, getAgentDir } from "@mariozechner/pi-coding-agent";
import { CompactorClient, notPermitted, withDeadline } from "./src/client.ts";
import {
	agentInboxPrefix,
	type Config,
	describeNats,
	type FlagValues,
	loadConfig,
	type PiCompactionSettings,
	readPiCompactionSettings,
} from "./src/config.ts";
import {
	bridgeSubject,
	type HookReport,
	hookSubject,
	locateSession,
	prepareJob,
	prepareSubject,
	preparedKey,
	type SessionLocation,
} from "./src/session.ts";
import { type LastAsk, Pace, shouldAsk } from "./src/trigger.ts";
import { type AgentMessage, type CheckResult, checkPrepared, lastCompactionIndex } from "./src/validate.ts";

/** What the extension keeps about the session it is bound to. */
interface SessionState {
	file: string;
	sessionId: string;
	location: SessionLocation | undefined;
	lastAsk: LastAsk | undefined;
	asking: boolean;
	piSettings: PiCompactionSettings;
	pace: Pace;
}

const FLAG_OFF = "compactor-off";
const FLAG_FRACTION = "compactor-prepare-fraction";
const FLAG_DEADLINE = "compactor-deadline-ms";

export default function compactorExtension(pi: ExtensionAPI): void {
	pi.registerFlag(FLAG_OFF, { description: "compactor: do not use prepared summaries (Pi compacts by itself)", type: "boolean" });
	pi.registerFlag(FLAG_FRACTION, { description: "compactor: fraction of Pi's compaction threshold where preparing starts (default 0.7)", type: "string" });
	pi.registerFlag(FLAG_DEADLINE, { description: "compactor: how long /compact waits for a prepared summary, in ms (default 200)", type: "string" });

	let cfg: Config | undefined;
	let client: CompactorClient | undefined;
	let state: SessionState | undefined;
	let log: (msg: string) => void = () => {};

	const flags = (): FlagValues => {
		const str = (name: string) => {
			const v = pi.getFlag(name);
			return typeof v === "string" ? v : undefined;
		};
		return { off: pi.getFlag(FLAG_OFF) === true, fraction: str(FLAG_FRACTION), deadlineMs: str(FLAG_DEADLINE) };
	};

	/** location resolves (once the file exists) and caches where compactor finds this session. */
	const location = async (st: SessionState): Promise<SessionLocation | undefined> => {
		if (!st.location && cfg) {
			st.location = await locateSession(st.file, st.sessionId, cfg.stores);
			if (st.location) log(`session ${st.sessionId}: store ${st.location.store}, path ${st.location.path}`);
		}
		return st.location;
	};

	pi.on("session_start", (_event, ctx) => {
		try {
			const agentDir = getAgentDir();
			cfg = loadConfig(process.env, agentDir, flags());
			if (cfg.debug) log = (msg) => process.stderr.write(`[compactor] ${new Date().toISOString()} ${msg}\n`);
			for (const p of cfg.problems) log(`config: ${p}`);
			const file = ctx.sessionManager.getSessionFile();
			if (!cfg.enabled || !file) {
				log(!cfg.enabled ? "disabled" : "session is not persisted; nothing to prepare");
				state = undefined;
				return;
			}
			state = {
				file,
				sessionId: ctx.sessionManager.getSessionId(),
				location: undefined,
				lastAsk: undefined,
				asking: false,
				piSettings: readPiCompactionSettings(ctx.cwd, agentDir),
				pace: new Pace(cfg.prepareLatencyMs),
			};
			storeNames = cfg.stores.map((s) => s.name);
			// Replies come to this store's agent inbox, the one `compactor auth` permits it.
			client ??= new CompactorClient({ ...cfg.nats, inboxPrefix: cfg.nats.inboxPrefix ?? agentInboxPrefix(cfg.stores) });
			log(`active: nats ${describeNats(cfg.nats)}, stores ${cfg.stores.map((s) => s.name).join(",")}, fraction ${cfg.prepareFraction}, step ${cfg.prepareStep}, deadline ${cfg.deadlineMs} ms`);
		} catch (err) {
			state = undefined;
			log(`session_start: ${errText(err)}`);
		}
	});

	pi.on("agent_start", () => {
		state?.pace.runStarted();
	});

	pi.on("turn_end", (_event, ctx) => {
		try {
			const st = state;
			if (!cfg || !client || !st) return;
			st.pace.turnEnded(ctx.getContextUsage()?.tokens, performance.now());
			// The agent is working: have the connection ready before Pi ever compacts.
			client.warm();
			if (!st.asking) askIfDue(cfg, client, st, ctx);
		} catch (err) {
			log(`turn_end: ${errText(err)}`);
		}
	});

	/** askIfDue publishes a prepare job when the trigger says so; it never waits for NATS. */
	const askIfDue = (c: Config, cl: CompactorClient, st: SessionState, ctx: ExtensionContext) => {
		const usage = ctx.getContextUsage();
		const leafId = ctx.sessionManager.getLeafId();
		let branch: SessionEntry[] | undefined;
		const getBranch = () => (branch ??= ctx.sessionManager.getBranch());
		const pace = st.pace.estimate();
		const decision = shouldAsk(
			st.lastAsk,
			{
				tokens: usage?.tokens,
				contextWindow: usage?.contextWindow,
				reserveTokens: st.piSettings.reserveTokens,
				leafId,
				branch: () => {
					const path = getBranch();
					const ids = new Set(path.map((e) => e.id));
					return { latestCompactionId: latestCompactionId(path), onBranch: (id) => ids.has(id) };
				},
			},
			pace,
			{ fraction: c.prepareFraction, step: c.prepareStep },
		);
		if (!decision.ask || leafId === null || !usage || typeof usage.tokens !== "number") return;
		const tokens = usage.tokens;
		const compactionId = latestCompactionId(getBranch());
		st.asking = true;
		void (async () => {
			const loc = await location(st);
			if (!loc) {
				log(`prepare: ${st.file} is in none of the stores (or not written yet)`);
				return;
			}
			const job = prepareJob(loc, leafId, undefined, st.piSettings.keepRecentTokens, new Date());
			const outcome = await cl.publishPrepare(prepareSubject(loc), job);
			st.lastAsk = { leafId, tokens, compactionId, asks: decision.nth ?? 1 };
			log(`prepare requested at leaf ${leafId} (${decision.why}): ${outcome}`);
		})()
			.catch((err) => log(`prepare request failed: ${errText(err)}`))
			.finally(() => {
				st.asking = false;
			});
	};

	pi.on("session_before_compact", async (event, ctx) => {
		const t0 = performance.now();
		let outcome = "skipped";
		let kind: HookReport["outcome"] | undefined;
		let loc: SessionLocation | undefined;
		let bridged: number | undefined;
		try {
			const c = cfg;
			const st = state;
			if (!c || !client || !st) return undefined;
			const remaining = () => c.deadlineMs - (performance.now() - t0);
			loc = await location(st);
			if (!loc) {
				outcome = "miss (session in no store)";
				return undefined;
			}
			kind = "miss";
			const got = await withDeadline(client.getPrepared(preparedKey(loc)), remaining(), event.signal);
			if (!got.ok) {
				outcome = got.reason === "error" ? `miss (${errText(got.error)})` : `miss (${got.reason})`;
				if (got.reason === "error") kind = "error";
				return undefined;
			}
			if (got.value === undefined) {
				outcome = "miss (nothing prepared)";
				return undefined;
			}
			learnLatency(st, got.value);
			let r = check(got.value, st, loc, event, ctx);
			// A preparation is older than this compaction: its cut lies before Pi's. Bridged to
			// Pi's cut, the compaction keeps what Pi's own would keep.
			let bridge = "";
			if (bridgeable(r, got.value, event)) {
				const left = remaining();
				const br = await withDeadline(
					client.requestBridge(
						bridgeSubject(loc),
						{ v: 1, store: loc.store, path: loc.path, sessionId: st.sessionId, leafId: ctx.sessionManager.getLeafId() ?? "", firstKeptEntryId: event.preparation.firstKeptEntryId },
						left,
					),
					left,
					event.signal,
				);
				if (!br.ok) bridge = `bridge ${br.reason === "error" ? errText(br.error) : br.reason}`;
				else if (br.value.error !== undefined || br.value.prepared === undefined) bridge = `bridge refused: ${br.value.error ?? "no value"}`;
				else {
					const rb = check(br.value.prepared, st, loc, event, ctx);
					if (rb.ok) {
						r = rb;
						bridged = bridgedEntries(br.value.prepared);
						bridge = `bridged ${bridged} entries`;
					} else bridge = `bridged value refused: ${rb.refusal}: ${rb.detail}`;
				}
			}
			if (!r.ok) {
				kind = "stale";
				outcome = `stale (${r.refusal}: ${r.detail}${bridge ? `; ${bridge}` : ""})`;
				return undefined;
			}
			if (event.signal.aborted) {
				kind = undefined;
				outcome = "aborted";
				return undefined;
			}
			kind = "hit";
			outcome = `hit (firstKept ${r.compaction.firstKeptEntryId}${r.compaction.firstKeptEntryId === event.preparation.firstKeptEntryId ? " = Pi's cut" : ` (Pi's: ${event.preparation.firstKeptEntryId})`}, summary ${r.summaryTokens} + kept ${r.keptTokens} <= ${r.threshold} tokens${bridge ? `; ${bridge}` : ""})`;
			return { compaction: r.compaction };
		} catch (err) {
			kind = "error";
			outcome = `error (${errText(err)})`;
			return undefined;
		} finally {
			const ms = performance.now() - t0;
			log(`session_before_compact: ${outcome} in ${ms.toFixed(1)} ms`);
			if (kind && loc && client && state) {
				const report: HookReport = {
					v: 1, store: loc.store, sessionId: state.sessionId, outcome: kind, latencyMs: ms,
					leafId: ctx.sessionManager.getLeafId() ?? undefined,
				};
				if (kind !== "hit") report.reason = outcome;
				if (bridged !== undefined) {
					report.bridged = true;
					report.bridgedEntries = bridged;
				}
				client.report(hookSubject(loc), report);
			}
		}
	});

	const check = (value: unknown, st: SessionState, loc: SessionLocation, event: SessionBeforeCompactEvent, ctx: ExtensionContext) => {
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
			estimate: (m: AgentMessage) => estimateTokens(m),
		});
	};

	pi.on("session_compact", () => {
		if (!state) return;
		state.lastAsk = undefined;
		state.pace.compacted();
	});

	pi.on("session_shutdown", async () => {
		const cl = client;
		client = undefined;
		state = undefined;
		if (!cl) return;
		// Bounded: shutting down must not hang on an unreachable server.
		const r = await withDeadline(cl.close(), 1000);
		if (!r.ok) log(`close: ${r.reason === "error" ? errText(r.error) : r.reason}`);
	});
}

/**
 * bridgeable: the value was made for this branch (it passes every check, or fails only for
 * its size, which a later cut may fix) and its cut lies before Pi's own.
 */
function bridgeable(r: CheckResult, value: unknown, event: SessionBeforeCompactEvent): boolean {
	if (!r.ok && r.refusal !== "too-big") return false;
	const cut = (value as { firstKeptEntryId?: unknown }).firstKeptEntryId;
	const ids = event.branchEntries.map((e) => e.id);
	const mine = typeof cut === "string" ? ids.indexOf(cut) : -1;
	const pis = ids.indexOf(event.preparation.firstKeptEntryId);
	return mine >= 0 && pis > mine;
}

/** bridgedEntries is how many messages a bridged value's bridge covered. */
function bridgedEntries(value: unknown): number {
	const b = (value as { bridge?: { messages?: unknown } }).bridge;
	return typeof b?.messages === "number" ? b.messages : 0;
}

/** learnLatency takes how long the value took to prepare (request to value) into the pace. */
function learnLatency(st: SessionState, value: unknown): void {
	const v = value as { requestedAt?: unknown; createdAt?: unknown };
	if (typeof v?.requestedAt !== "string" || typeof v.createdAt !== "string") return;
	st.pace.preparationTook(Date.parse(v.createdAt) - Date.parse(v.requestedAt));
}

function latestCompactionId(path: SessionEntry[]): string | null {
	const i = lastCompactionIndex(path);
	return i >= 0 ? path[i].id : null;
}

/** The configured stores' names, for the words of a refusal. */
let storeNames: string[] = [];

/** errText is an error for the debug log; a refusal by the server reads "not permitted: SUBJECT (...)". */
function errText(err: unknown): string {
	const refused = notPermitted(err, storeNames);
	if (refused !== undefined) return refused;
	if (err instanceof Error) return err.message;
	return String(err);
}
