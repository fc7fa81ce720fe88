// compactor's Pi extension: zero-wait compaction.
//
// While the agent works, compactor prepares the summary in the background; when Pi compacts
// (automatically or by /compact), this extension hands Pi that prepared summary through the
// session_before_compact hook, so Pi skips its own summarizer call and appends the compaction
// itself, from its in-memory leaf. Pi is never made worse: whenever nothing valid is ready
// within a short deadline, or compactor cannot be reached, the hook returns nothing and Pi
// compacts as it always does. Nothing here throws into Pi, shows an error, or writes a file.
//
//   agent_start            a run starts: the pace is measured over working time, from here
//   turn_end               a preparation due (src/trigger.ts)? -> publish a prepare job;
//                          a request in flight? -> has its value landed?
//   session_before_compact fetch the prepared value (bounded); if its cut lies before Pi's,
//                          ask a worker to bridge it to Pi's cut; check it, return it; with
//                          none valid, for an automatic compaction, ask a worker for the
//                          extract (the previous summary plus extractive notes); else nothing
//   session_compact        a new cycle starts (the branch has a new compaction)
//   session_compact_failed Pi 1.x: the compaction did not happen (logged)
//   session_shutdown       close the NATS connection
//
// Works in Pi 0.73.1 (@mariozechner/pi-coding-agent) and Pi 1.x (@earendil-works/...): Pi's
// runtime API is imported by the old name, which Pi 1.x maps to itself. Load it with
// `pi -e extensions/pi/index.ts`, or install extensions/pi as a Pi package (`pi install`).
// Configuration and the contract with compactor are in README.md beside this file.

import type { ExtensionAPI, ExtensionContext, SessionBeforeCompactEvent, SessionEntry } from "@earendil-works/pi-coding-agent";
import * as piApi from "@mariozechner/pi-coding-agent";
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
import { contextEntries, contextTokens, preparableTokens } from "./src/context.ts";
import {
	bridgeSubject,
	type BridgeRequest,
	type HookReason,
	type HookReport,
	type HookResult,
	hookSubject,
	locateSession,
	prepareJob,
	prepareSubject,
	preparedKey,
	type SessionLocation,
	type ValueMaking,
	valueMaking,
} from "./src/session.ts";
import { type Cycle, type InFlight, lostAfterMs, Pace, shouldAsk } from "./src/trigger.ts";
import { has } from "./src/rules.ts";
import { type AgentMessage, type CheckResult, checkPrepared, type EntryMessages, lastCompactionIndex, type Project, type Refusal } from "./src/validate.ts";

/** The host Pi's API: what every release exports, and what only newer ones do. */
const host = piApi as unknown as {
	VERSION?: string;
	estimateTokens: (m: AgentMessage) => number;
	getAgentDir: () => string;
	buildSessionProjection?: (entries: SessionEntry[]) => ReturnType<Project>;
	buildContextEntries?: (entries: SessionEntry[]) => SessionEntry[];
	sessionEntryToContextMessages?: (entry: SessionEntry) => AgentMessage[];
};
/** Pi >= 0.87 builds contexts and plans on its projection; older releases on the raw path. */
const project: Project | undefined = typeof host.buildSessionProjection === "function" ? (path) => host.buildSessionProjection?.(path) as ReturnType<Project> : undefined;
/** Pi 0.80.6 .. 0.86: the raw path, with what each entry puts into the context. */
const entryMessages: EntryMessages | undefined =
	!project && typeof host.buildContextEntries === "function" && typeof host.sessionEntryToContextMessages === "function"
		? {
				contextEntries: (path) => host.buildContextEntries?.(path) ?? path,
				contextMessages: (e) => host.sessionEntryToContextMessages?.(e) ?? [],
				systemMessages: has(host.VERSION, "SystemMessages"),
			}
		: undefined;
const estimate = (m: AgentMessage) => host.estimateTokens(m);

/** What the extension keeps about the session it is bound to. */
interface SessionState {
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
	/** The last decision logged (digits left out), so that the log says each reason once in a row. */
	lastWhy: string;
	/** When the current cycle began (performance.now()). */
	cycleStartedAt: number;
	/** How long the last complete cycle took (from one compaction to the next), in ms. */
	lastCycleMs: number | undefined;
	/** The session's hooks by "result/reason". */
	counts: Record<string, number>;
}

/** How often at most the extension reads the bucket for a preparation in flight. */
const POLL_EVERY_MS = 1000;
/** The shortest wait before a poll put off runs (one still running ends within POLL_EVERY_MS). */
const POLL_RETRY_MIN_MS = 50;

const FLAG_OFF = "compactor-off";
const FLAG_FRACTION = "compactor-prepare-fraction";
const FLAG_DEADLINE = "compactor-deadline-ms";

export default function compactorExtension(pi: ExtensionAPI): void {
	pi.registerFlag(FLAG_OFF, { description: "compactor: do not use prepared summaries (Pi compacts by itself)", type: "boolean" });
	pi.registerFlag(FLAG_FRACTION, { description: "compactor: fraction of a cycle's room that must be summarizable before the first preparation (default 0.05)", type: "string" });
	pi.registerFlag(FLAG_DEADLINE, { description: "compactor: how long the hook waits for a prepared summary, in ms (default 200)", type: "string" });

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
			if (state?.pollTimer) clearTimeout(state.pollTimer);
			const agentDir = host.getAgentDir();
			cfg = loadConfig(process.env, agentDir, flags());
			if (cfg.debug) log = (msg) => process.stderr.write(`[compactor] ${new Date().toISOString()} ${msg}\n`);
			for (const p of cfg.problems) log(`config: ${p}`);
			const file = ctx.sessionManager.getSessionFile();
			if (!cfg.enabled || !file) {
				log(!cfg.enabled ? "disabled" : "session is not persisted; nothing to prepare");
				state = undefined;
				return;
			}
			const path = ctx.sessionManager.getBranch();
			state = {
				file,
				sessionId: ctx.sessionManager.getSessionId(),
				location: undefined,
				piSettings: readPiCompactionSettings(ctx.cwd, agentDir),
				pace: new Pace(cfg.prepareLatencyMs),
				cycle: { compactionId: latestCompactionId(path), asks: 0 },
				inFlight: undefined,
				asking: false,
				polling: false,
				lastPollAt: -Infinity,
				pollTimer: undefined,
				lastWhy: "",
				cycleStartedAt: performance.now(),
				lastCycleMs: undefined,
				counts: {},
			};
			storeNames = cfg.stores.map((s) => s.name);
			// Replies come to this store's agent inbox, the one `compactor auth` permits it.
			client ??= new CompactorClient({ ...cfg.nats, inboxPrefix: cfg.nats.inboxPrefix ?? agentInboxPrefix(cfg.stores) });
			log(
				`active in Pi ${host.VERSION ?? "(version unknown)"}${project ? " (projected contexts)" : entryMessages ? " (entry contexts)" : ""}: nats ${describeNats(cfg.nats)}, stores ${cfg.stores.map((s) => s.name).join(",")}, ` +
					`start ${cfg.prepareFraction}, step ${cfg.prepareStep}, deadline ${cfg.deadlineMs} ms, extract ${cfg.extract ? `on (${cfg.extractDeadlineMs} ms)` : "off"}`,
			);
		} catch (err) {
			state = undefined;
			log(`session_start: ${errText(err)}`);
		}
	});

	pi.on("agent_start", (_event, ctx) => {
		try {
			state?.pace.runStarted(ctx.getContextUsage()?.tokens, performance.now());
		} catch (err) {
			log(`agent_start: ${errText(err)}`);
		}
	});

	pi.on("turn_end", (_event, ctx) => {
		try {
			const st = state;
			if (!cfg || !client || !st) return;
			const now = performance.now();
			st.pace.turnEnded(ctx.getContextUsage()?.tokens, now);
			// The agent is working: have the connection ready before Pi ever compacts.
			client.warm();
			if (st.inFlight) {
				if (now - st.inFlight.at > lostAfterMs(st.pace.estimate())) {
					log(`prepare requested at ${clock(st.inFlight.requestedAt)} never landed in ${secs(now - st.inFlight.at)}: given up (skipped by the worker, or lost)`);
					st.inFlight = undefined;
				} else pollInFlight(client, st, now);
			}
			if (!st.asking) askIfDue(cfg, client, st, ctx, now);
		} catch (err) {
			log(`turn_end: ${errText(err)}`);
		}
	});

	/**
	 * pollInFlight looks (at most once a second, in the background) whether the value asked for
	 * has landed, and keeps looking once a second until it has or the request is given up
	 * (lostAfterMs). A look it may not take now (too soon after the last, or the last still
	 * running) is put off rather than dropped. So a value that lands after the run's last turn
	 * is seen when it lands, not at the next run's turns, and the next preparation is not held
	 * back by a request that has in fact landed.
	 */
	const pollInFlight = (cl: CompactorClient, st: SessionState, now: number) => {
		if (!st.inFlight || !st.location) return;
		if (st.polling || now - st.lastPollAt < POLL_EVERY_MS) return pollLater(st, now);
		st.polling = true;
		st.lastPollAt = now;
		const loc = st.location;
		void withDeadline(cl.getPrepared(preparedKey(loc)), POLL_EVERY_MS)
			.then((got) => {
				if (got.ok && got.value !== undefined) noteValue(st, got.value);
			})
			.finally(() => {
				st.polling = false;
				// not landed yet (or the read failed): look again in a second, until it lands or
				// is given up, whether or not the agent takes another turn
				if (st.inFlight) pollLater(st, performance.now());
			});
	};

	/** pollLater makes pollInFlight's next look, once (a single timer), when it may. */
	const pollLater = (st: SessionState, now: number) => {
		if (st.pollTimer) return;
		const wait = Math.max(POLL_RETRY_MIN_MS, st.lastPollAt + POLL_EVERY_MS - now);
		st.pollTimer = setTimeout(() => {
			st.pollTimer = undefined;
			const cl = client;
			const f = st.inFlight;
			// the session moved on, the extension closed, or the request landed meanwhile
			if (state !== st || !cl || !f) return;
			const at = performance.now();
			if (at - f.at > lostAfterMs(st.pace.estimate())) return; // the next turn_end gives it up
			pollInFlight(cl, st, at);
		}, wait);
		// a put-off poll never keeps Pi's process alive
		st.pollTimer.unref?.();
	};

	/** noteValue learns from a value read from the bucket: when the request in flight landed, and how long it took. */
	const noteValue = (st: SessionState, value: unknown): string => {
		const v = value as { requestedAt?: unknown; createdAt?: unknown; leafId?: unknown };
		if (typeof v?.requestedAt !== "string" || typeof v.createdAt !== "string") return "";
		const asked = Date.parse(v.requestedAt);
		const made = Date.parse(v.createdAt);
		const took = made - asked;
		const timing = `requested ${clock(asked)}, ready after ${secs(took)}, ${secs(Date.now() - made)} ago`;
		const f = st.inFlight;
		if (f && asked === f.requestedAt) {
			st.pace.preparationTook(took);
			st.inFlight = undefined;
			log(`preparation #${f.nth} landed: leaf ${String(v.leafId)}, ${timing}`);
		}
		return timing;
	};

	/** askIfDue publishes a prepare job when the trigger says so; it never waits for NATS. */
	const askIfDue = (c: Config, cl: CompactorClient, st: SessionState, ctx: ExtensionContext, now: number) => {
		const usage = ctx.getContextUsage();
		const leafId = ctx.sessionManager.getLeafId();
		let path: SessionEntry[] | undefined;
		const branch = () => (path ??= ctx.sessionManager.getBranch());
		const compactionId = latestCompactionId(branch());
		if (st.cycle.compactionId !== compactionId) st.cycle = { compactionId, asks: 0 };
		const pace = st.pace.estimate();
		const decision = shouldAsk(
			st.cycle,
			st.inFlight,
			{
				tokens: usage?.tokens,
				contextWindow: usage?.contextWindow ?? ctx.model?.contextWindow,
				reserveTokens: st.piSettings.reserveTokens,
				keepRecentTokens: st.piSettings.keepRecentTokens,
				leafId,
				compactionId,
				// what a worker would prepare now (0 in the middle of a turn Pi 0.73 could not cut)
				summarizable: () =>
					preparableTokens(contextEntries(branch(), project, entryMessages), st.piSettings.keepRecentTokens, estimate, has(host.VERSION, "TrailingToolResultsKeepLastCut")),
				lastCycleMs: st.lastCycleMs,
			},
			pace,
			{ start: c.prepareFraction, step: c.prepareStep },
			now,
		);
		const why = decision.why.replace(/[\d.]+/g, "#");
		if (!decision.ask) {
			if (why !== st.lastWhy) log(`turn_end: no request (${decision.why})`);
			st.lastWhy = why;
			return;
		}
		st.lastWhy = "";
		if (leafId === null || !usage || typeof usage.tokens !== "number") return;
		const tokens = usage.tokens;
		const nth = decision.nth ?? 1;
		st.asking = true;
		void (async () => {
			const loc = await location(st);
			if (!loc) {
				log(`prepare: ${st.file} is in none of the stores (or not written yet)`);
				return;
			}
			const requested = new Date();
			const job = prepareJob(loc, leafId, undefined, st.piSettings.keepRecentTokens, requested, host.VERSION);
			const outcome = await cl.publishPrepare(prepareSubject(loc), job);
			if (outcome === "pending") {
				// An older preparation of this session is still queued or running (the queue keeps
				// one per session): ask again at a later turn, once it has landed.
				log(`prepare #${nth} at leaf ${leafId} (${decision.why}): an earlier preparation is still pending; asking again later`);
				return;
			}
			st.inFlight = { requestedAt: requested.getTime(), at: performance.now(), leafId, nth, compactionId };
			pollLater(st, performance.now()); // look until it lands, whether or not the agent takes another turn
			const firstTokens = nth === 1 ? tokens : st.cycle.firstTokens;
			st.cycle = { compactionId, asks: nth, firstTokens, lastLeafId: leafId };
			log(`prepare #${nth} requested at leaf ${leafId} (${decision.why}; ${Math.round(pace.tokensPerSecond ?? 0)} tokens/s, latency ${secs(pace.latencyMs)}${pace.latencyMeasured ? "" : " (guess)"}): ${outcome}`);
		})()
			.catch((err) => log(`prepare request failed: ${errText(err)}`))
			.finally(() => {
				st.asking = false;
			});
	};

	pi.on("session_before_compact", async (event, ctx) => {
		const t0 = performance.now();
		const ev = event as SessionBeforeCompactEvent & { reason?: string; willRetry?: boolean }; // Pi 0.73: neither
		let outcome = "skipped";
		let kind: HookReport["outcome"] | undefined;
		let result: HookResult = "pi";
		let reasonCode: HookReason = "error";
		let loc: SessionLocation | undefined;
		let bridged: number | undefined;
		let timing = "";
		// how the summary Pi gets was written (what the value says of itself)
		let making: ValueMaking = {};
		const piReason = ev.reason ?? inferReason(ctx, event);
		try {
			const c = cfg;
			const st = state;
			if (!c || !client || !st) return undefined;
			const remaining = () => c.deadlineMs - (performance.now() - t0);
			loc = await location(st);
			if (!loc) {
				outcome = "miss (session in no store)";
				reasonCode = "no-store";
				return undefined;
			}
			kind = "miss";
			const got = await withDeadline(client.getPrepared(preparedKey(loc)), remaining(), event.signal);
			let r: CheckResult | undefined;
			let bridge = "";
			if (!got.ok) {
				outcome = got.reason === "error" ? `miss (${errText(got.error)})` : `miss (${got.reason})`;
				if (got.reason === "error") kind = "error";
				reasonCode = "nats";
			} else if (got.value === undefined) {
				outcome = "miss (nothing prepared)";
				reasonCode = inFlightForThisCycle(st, event) ? "not-ready" : "not-prepared";
			} else {
				timing = noteValue(st, got.value);
				r = check(got.value, st, loc, event, ctx);
				// A preparation is older than this compaction: its cut lies before Pi's. Bridged to
				// Pi's cut, the compaction keeps what Pi's own would keep.
				if (bridgeable(r, got.value, event)) {
					const left = remaining();
					const br = await withDeadline(client.requestBridge(bridgeSubject(loc), bridgeRequest(loc, st, ctx, event), left), left, event.signal);
					if (!br.ok) {
						bridge = `bridge ${br.reason === "error" ? errText(br.error) : br.reason}`;
						reasonCode = br.reason === "timeout" ? "bridge-late" : "bridge-refused";
					} else if (br.value.error !== undefined || br.value.prepared === undefined) {
						bridge = `bridge refused: ${br.value.error ?? "no value"}`;
						reasonCode = "bridge-refused";
					} else {
						const rb = check(br.value.prepared, st, loc, event, ctx);
						if (rb.ok) {
							r = rb;
							making = valueMaking(br.value.prepared);
							bridged = bridgedEntries(br.value.prepared);
							bridge = `bridged ${bridged} entries`;
						} else {
							bridge = `bridged value refused: ${rb.refusal}: ${rb.detail}`;
							reasonCode = "bridge-refused";
						}
					}
				}
				if (!r.ok) {
					kind = "stale";
					outcome = `stale (${r.refusal}: ${r.detail}${bridge ? `; ${bridge}` : ""})`;
					if (!bridge) reasonCode = reasonOf(r.refusal, inFlightForThisCycle(st, event));
				}
			}
			if (r?.ok) {
				if (event.signal.aborted) {
					kind = undefined;
					outcome = "aborted";
					return undefined;
				}
				kind = "hit";
				result = "prepared";
				reasonCode = "none";
				if (bridged === undefined) making = valueMaking(got.ok ? got.value : undefined);
				outcome = `hit (firstKept ${r.compaction.firstKeptEntryId}${sameCut(r, event)}, summary ${r.summaryTokens} + kept ${r.keptTokens} <= ${r.threshold} tokens${bridge ? `; ${bridge}` : ""})`;
				return { compaction: r.compaction };
			}
			// No preparation is valid for this branch. An automatic compaction is answered from
			// the previous summary plus extractive notes, made by a worker in milliseconds; /compact
			// (the user asked for a summary) and anything NATS could not reach go to Pi.
			if (c.extract && reasonCode !== "nats" && (piReason === "threshold" || piReason === "overflow") && !event.signal.aborted) {
				const ex = await extract(c, client, st, loc, ctx, event);
				outcome += `; extract ${ex.text}`;
				if (ex.result?.ok) {
					if (event.signal.aborted) {
						kind = undefined;
						outcome += "; aborted";
						return undefined;
					}
					kind = "hit";
					result = "extract";
					making = ex.making ?? {};
					return { compaction: ex.result.compaction };
				}
			}
			return undefined;
		} catch (err) {
			kind = "error";
			reasonCode = "error";
			outcome = `error (${errText(err)})`;
			return undefined;
		} finally {
			const ms = performance.now() - t0;
			const st = state;
			if (st) {
				const key = `${result}/${reasonCode}`;
				st.counts[key] = (st.counts[key] ?? 0) + 1;
			}
			const inflight = st?.inFlight ? `; preparation #${st.inFlight.nth} requested ${clock(st.inFlight.requestedAt)}, in flight for ${secs(performance.now() - st.inFlight.at)}` : "";
			const about = timing ? `; value ${timing}` : "";
			// Pi's own summary: a model's, over the span of Pi's own preparation
			if (result === "pi") making = { spanTokens: { model: piSpanTokens(event), extract: 0 } };
			log(`session_before_compact: ${outcome} [${result}/${reasonCode}, ${piReason}${ev.willRetry ? ", will retry" : ""}${about}${inflight}${describeMaking(making)}] in ${ms.toFixed(1)} ms`);
			if (kind && loc && client && st) {
				const report: HookReport = {
					v: 1, store: loc.store, sessionId: st.sessionId, outcome: kind, latencyMs: ms,
					leafId: ctx.sessionManager.getLeafId() ?? undefined, result, reasonCode, piReason, counts: { ...st.counts },
				};
				if (kind !== "hit" || result !== "prepared") report.reason = outcome;
				if (making.spanTokens) report.spanTokens = making.spanTokens;
				if (making.base) report.base = making.base;
				if (making.baseRefused) report.baseRefused = making.baseRefused;
				if (bridged !== undefined) {
					report.bridged = true;
					report.bridgedEntries = bridged;
				}
				client.report(hookSubject(loc), report);
			}
		}
	});

	/** extract asks a worker for the answer made without a model at Pi's cut, and checks it. */
	const extract = async (c: Config, cl: CompactorClient, st: SessionState, loc: SessionLocation, ctx: ExtensionContext, event: SessionBeforeCompactEvent) => {
		const req = { ...bridgeRequest(loc, st, ctx, event), extract: true };
		const br = await withDeadline(cl.requestBridge(bridgeSubject(loc), req, c.extractDeadlineMs), c.extractDeadlineMs, event.signal);
		if (!br.ok) return { text: br.reason === "error" ? `failed: ${errText(br.error)}` : br.reason };
		if (br.value.error !== undefined || br.value.prepared === undefined) return { text: `refused: ${br.value.error ?? "no value"}` };
		const r = check(br.value.prepared, st, loc, event, ctx);
		return {
			text: r.ok ? `used (summary ${r.summaryTokens} + kept ${r.keptTokens} <= ${r.threshold} tokens)` : `refused: ${r.refusal}: ${r.detail}`,
			result: r,
			making: valueMaking(br.value.prepared),
		};
	};

	/** piSpanTokens is the span Pi's own compaction summarizes, by Pi's estimate. */
	const piSpanTokens = (event: SessionBeforeCompactEvent): number => {
		let n = 0;
		try {
			const p = event.preparation as { messagesToSummarize?: AgentMessage[]; turnPrefixMessages?: AgentMessage[] };
			for (const m of [...(p.messagesToSummarize ?? []), ...(p.turnPrefixMessages ?? [])]) n += estimate(m);
		} catch {
			return 0;
		}
		return n;
	};

	const bridgeRequest = (loc: SessionLocation, st: SessionState, ctx: ExtensionContext, event: SessionBeforeCompactEvent): BridgeRequest => ({
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
			estimate,
			project,
			entryMessages,
			preparation: event.preparation,
			piVersion: host.VERSION,
		});
	};

	pi.on("session_compact", (event, ctx) => {
		try {
			const st = state;
			if (!st) return;
			const ev = event as { compactionEntry?: { id?: string }; fromExtension?: boolean; reason?: string; willRetry?: boolean };
			const path = ctx.sessionManager.getBranch();
			const now = performance.now();
			const after = contextTokens(contextEntries(path, project, entryMessages), estimate);
			st.pace.compacted(after, now);
			const was = st.cycle;
			st.cycle = { compactionId: ev.compactionEntry?.id ?? latestCompactionId(path), asks: 0 };
			log(
				`session_compact (${ev.reason ?? "reason unknown"}${ev.willRetry ? ", will retry" : ""}, ${ev.fromExtension ? "from this extension" : "Pi's own summary"}): ` +
					`the cycle took ${secs(now - st.cycleStartedAt)} with ${was.asks} request(s); the context is now about ${after} tokens`,
			);
			// The first cycle of a session (or of this Pi process) starts anywhere: only complete cycles count.
			if (st.cycleStartedAt !== undefined && was.compactionId !== null) st.lastCycleMs = now - st.cycleStartedAt;
			st.cycleStartedAt = now;
		} catch (err) {
			log(`session_compact: ${errText(err)}`);
		}
	});

	// Pi 1.x: the compaction failed or was cancelled; the cycle goes on. (Pi 0.73 never emits it.)
	pi.on("session_compact_failed", (ev) => {
		log(
			`session_compact_failed (${ev.reason ?? "reason unknown"}${ev.aborted ? ", aborted" : ""}${ev.fromExtension ? ", with this extension's value" : ""}): ${ev.errorMessage ?? "no message"}`,
		);
	});

	pi.on("session_shutdown", async () => {
		const cl = client;
		client = undefined;
		if (state?.pollTimer) clearTimeout(state.pollTimer);
		state = undefined;
		if (!cl) return;
		// Bounded: shutting down must not hang on an unreachable server.
		const r = await withDeadline(cl.close(), 1000);
		if (!r.ok) log(`close: ${r.reason === "error" ? errText(r.error) : r.reason}`);
	});
}

/**
 * inferReason is Pi 0.73's reason for compacting, which its event does not carry: Pi
 * compacts by itself only past its threshold, and a user's /compact usually comes before it.
 */
function inferReason(ctx: ExtensionContext, event: SessionBeforeCompactEvent): string {
	if (event.customInstructions !== undefined) return "manual";
	const tokens = ctx.getContextUsage()?.tokens;
	const window = ctx.model?.contextWindow ?? 0;
	return typeof tokens === "number" && window > 0 && tokens > window - event.preparation.settings.reserveTokens ? "threshold" : "manual";
}

/** inFlightForThisCycle: a preparation asked for in the cycle Pi now compacts had not landed. */
function inFlightForThisCycle(st: SessionState, event: SessionBeforeCompactEvent): boolean {
	return st.inFlight !== undefined && st.inFlight.compactionId === latestCompactionId(event.branchEntries);
}

/** reasonOf is the word for a refusal of the prepared value. */
function reasonOf(refusal: Refusal, cycleInFlight: boolean): HookReason {
	switch (refusal) {
		case "previous-compaction":
			// the value is an earlier cycle's: this cycle's own had not landed (or was never asked for)
			return cycleInFlight ? "not-ready" : "other-compaction";
		case "leaf-off-branch":
		case "cut-off-branch":
		case "cut-after-leaf":
		case "cut-before-boundary":
		case "cut-on-tool-result":
			return "stale-leaf";
		case "instructions":
			return "instructions";
		case "pi-version":
			return "other-pi";
		case "entries-differ":
			return "entries-differ";
		case "too-big":
			return "too-big";
		default:
			return "malformed";
	}
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

function sameCut(r: CheckResult & { ok: true }, event: SessionBeforeCompactEvent): string {
	return r.compaction.firstKeptEntryId === event.preparation.firstKeptEntryId ? " = Pi's cut" : ` (Pi's: ${event.preparation.firstKeptEntryId})`;
}

/** bridgedEntries is how many messages a bridged value's bridge covered. */
function bridgedEntries(value: unknown): number {
	const b = (value as { bridge?: { messages?: unknown } }).bridge;
	return typeof b?.messages === "number" ? b.messages : 0;
}

/**
 * describeMaking says in the debug line what the summary Pi got was built on and how much of
 * its span a model read: "; base model (made 07:27:55.1); span 12000 tokens: 0 model, 12000 extract".
 */
function describeMaking(m: ValueMaking): string {
	let out = "";
	if (m.base) {
		out += `; base ${m.base}`;
		const notes = [];
		if (m.baseMadeAt && m.base === "model") notes.push(`made ${clock(Date.parse(m.baseMadeAt))}`);
		if (m.baseRefused) notes.push(`refused: ${m.baseRefused}`);
		if (m.readAgainTokens) notes.push(`${m.readAgainTokens} tokens of older spans read again`);
		if (m.via) notes.push(`via compaction ${m.via}`);
		if (notes.length) out += ` (${notes.join(", ")})`;
	}
	if (m.spanTokens) {
		const { model, extract } = m.spanTokens;
		out += `; span ${model + extract} tokens: ${model} model, ${extract} extract`;
	}
	return out;
}

function latestCompactionId(path: SessionEntry[]): string | null {
	const i = lastCompactionIndex(path);
	return i >= 0 ? path[i].id : null;
}

function clock(ms: number): string {
	return new Date(ms).toISOString().slice(11, 23);
}

function secs(ms: number): string {
	return `${(ms / 1000).toFixed(1)} s`;
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
