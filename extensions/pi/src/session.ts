// Naming a Pi session the way compactor's Go side does: the subject token of its id, the
// store that holds its file and the file's path relative to that store's root, the KV key
// of its prepared summary and the prepare job published for it. The messages, subject roots
// and builders are compactor's Go types and functions, generated into wire.gen.ts.

import { createHash } from "node:crypto";
import { realpath } from "node:fs/promises";
import { isAbsolute, relative, resolve, sep } from "node:path";
import type { Store } from "./config.ts";
import * as wire from "./wire.gen.ts";

export const JOBS_STREAM = wire.StreamJobs;
export const PREPARED_BUCKET = wire.BucketPrepared;
/** JetStream err_code for "maximum messages per subject exceeded": a job is already pending. */
export const ERR_CODE_PENDING = 10077;

/**
 * sessionToken maps a session id to a NATS subject token exactly as compactor's
 * pipeline.SessionToken: the id itself when it is a safe token (1-128 ASCII characters, no
 * whitespace or control characters, no '.', '*', '>', DEL, not starting with "h-"), else
 * "h-" + the first 16 bytes of sha256(id) in lowercase hex.
 */
export function sessionToken(id: string): string {
	if (isSafeToken(id) && !id.startsWith("h-")) return id;
	return `h-${sha256hex(id).slice(0, 32)}`;
}

function isSafeToken(s: string): boolean {
	if (s.length === 0 || s.length > 128) return false;
	for (let i = 0; i < s.length; i++) {
		const c = s.charCodeAt(i);
		// c <= 32: controls and space; 46 '.', 42 '*', 62 '>', 127 DEL, > 127 non-ASCII
		if (c <= 32 || c === 46 || c === 42 || c === 62 || c >= 127) return false;
	}
	return true;
}

/** Where a session file lives for compactor. */
export interface SessionLocation {
	store: string;
	/** Path relative to the store root, forward slashes. */
	path: string;
	sessionId: string;
	token: string;
}

/**
 * locateSession finds the first configured store (in configuration order, as the enqueue
 * CLI does) whose root contains the session file, after resolving symlinks on both. It
 * returns undefined when the file does not exist yet (Pi writes it at the first assistant
 * message) or lies in no store.
 */
export async function locateSession(
	file: string,
	sessionId: string,
	stores: Store[],
	cwd: string = process.cwd(),
): Promise<SessionLocation | undefined> {
	let real: string;
	try {
		real = await realpath(resolve(cwd, file));
	} catch {
		return undefined;
	}
	for (const st of stores) {
		let root: string;
		try {
			root = await realpath(resolve(cwd, st.dir));
		} catch {
			continue;
		}
		const rel = relative(root, real);
		if (rel === "" || rel === ".." || rel.startsWith(`..${sep}`) || isAbsolute(rel)) continue;
		return { store: st.name, path: rel.split(sep).join("/"), sessionId, token: sessionToken(sessionId) };
	}
	return undefined;
}

/** preparedKey is the COMPACTOR_PREPARED key of a session: <store>.<session token>. */
export function preparedKey(loc: SessionLocation): string {
	return wire.preparedKey(loc.store, loc.token);
}

/**
 * The JSON payload of a prepare job: compactor's wire.Job of kind "prepare", planned as Pi
 * plans (policy pi, Pi's estimate, Pi's keepRecentTokens: the cut Pi would make now), by the
 * rules of piVersion (Pi's VERSION) when given.
 */
export type PrepareJob = wire.Job & {
	v: typeof wire.JobVersion;
	kind: typeof wire.KindPrepare;
	reason: "extension";
	expectLeafId: string;
	policy: "pi";
	counter: "estimate";
	keepRecentTokens: number;
};

/** prepareSubject is compactor.jobs.<store>.<session token>.prepare. */
export function prepareSubject(loc: SessionLocation): string {
	return wire.jobSubject(loc.store, loc.token, wire.KindPrepare);
}

/**
 * eventSubject is compactor.events.<store>.<session token> (compactor's pipeline.EventSubject):
 * each job of the session has its events on <eventSubject>.<job seq>, published by the worker
 * that worked it.
 */
export function eventSubject(loc: SessionLocation): string {
	return wire.eventSubject(loc.store, loc.token);
}

/** ResultEvent is a job's event (compactor's wire.Event). */
export type ResultEvent = wire.Event;

/**
 * hookSubject is where the extension reports each run of Pi's session_before_compact hook
 * (compactor counts them: compactor_prepared_lookups_total, compactor_prepared_lookup_seconds).
 */
export function hookSubject(loc: SessionLocation): string {
	return wire.hookSubject(loc.store, loc.token);
}

/** bridgeSubject is where a preparation is asked for, extended to Pi's cut (compactor.bridge.<store>.<session token>). */
export function bridgeSubject(loc: SessionLocation): string {
	return wire.bridgeSubject(loc.store, loc.token);
}

/** BridgeRequest is what the hook asks compactor's bridge (wire.BridgeRequest). */
export type BridgeRequest = wire.BridgeRequest;

/** BridgeReply is the bridge's answer: the bridged value, or why there is none (wire.BridgeReply). */
export type BridgeReply = wire.BridgeReply;

/** What answered Pi's hook: a preparation, the extract made at hook time, or nothing (Pi's own summary). */
export type HookResult = wire.HookResult;

/**
 * Why a hook did not use a preparation, in a word (compactor's wire.HookReasons; the label of
 * compactor_prepared_hook_total). "none": it did.
 */
export type HookReason = wire.HookReason;

/** HookReport is the message published on hookSubject (wire.HookReport), its words narrowed to compactor's. */
export type HookReport = wire.HookReport & { outcome: wire.HookOutcome; result?: HookResult; reasonCode?: HookReason };

/** A compaction's summarized span in tokens, by what wrote its summary. */
export type SpanTokens = wire.SpanTokens;

/** What a value compactor made says about how its summary was written (engine.Prepared's builtOn, spanTokens). */
export interface ValueMaking {
	spanTokens?: SpanTokens;
	base?: string;
	baseRefused?: string;
	baseMadeAt?: string;
	readAgainTokens?: number;
	/** The previous compaction whose text an extract updated (itself an extract on that base). */
	via?: string;
	/** How many models' summaries of single spans continued the base's text. */
	segments?: number;
}

/** valueMaking reads builtOn and spanTokens from a value (anything: nothing it cannot read is trusted). */
export function valueMaking(value: unknown): ValueMaking {
	const v = value as { builtOn?: Record<string, unknown>; spanTokens?: Record<string, unknown> } | null;
	const out: ValueMaking = {};
	const sp = v?.spanTokens;
	if (sp && isCount(sp.model) && isCount(sp.extract)) out.spanTokens = { model: sp.model, extract: sp.extract };
	const b = v?.builtOn;
	if (b && typeof b.source === "string" && /^[a-z-]{1,32}$/.test(b.source)) {
		out.base = b.source;
		if (typeof b.refused === "string" && /^[a-z-]{1,32}$/.test(b.refused)) out.baseRefused = b.refused;
		if (typeof b.baseMadeAt === "string" && !Number.isNaN(Date.parse(b.baseMadeAt))) out.baseMadeAt = b.baseMadeAt;
		if (isCount(b.readAgainTokens) && b.readAgainTokens > 0) out.readAgainTokens = b.readAgainTokens;
		if (typeof b.via === "string" && /^[\w-]{1,64}$/.test(b.via)) out.via = b.via;
		if (isCount(b.segments) && b.segments > 0) out.segments = b.segments;
	}
	return out;
}

function isCount(x: unknown): x is number {
	return typeof x === "number" && Number.isInteger(x) && x >= 0;
}

/**
 * prepareJob builds the job for the session at leafId, planned as Pi plans (policy pi, Pi's
 * estimate, Pi's keepRecentTokens, by the rules of the Pi release that runs, piVersion): its
 * cut is the one Pi would make now. Its id (also the Nats-Msg-Id) changes whenever the
 * request changes: store, session, leaf, and a hash of path, instructions, keepRecentTokens
 * and the Pi version.
 */
export function prepareJob(
	loc: SessionLocation,
	leafId: string,
	instructions: string | undefined,
	keepRecentTokens: number,
	now: Date,
	piVersion?: string,
): PrepareJob {
	const instr = instructions?.trim() || undefined;
	const h = sha256hex(`${loc.path}\n${instr ?? ""}\n${keepRecentTokens}${piVersion ? `\n${piVersion}` : ""}`).slice(0, 16);
	let id = `prepare:${loc.store}:${loc.sessionId}:${leafId}:${h}`;
	// A header value must stay short and on one line, whatever the session id holds.
	if (id.length > 200 || /[\x00-\x1f\x7f]/.test(id)) id = `prepare:${sha256hex(id).slice(0, 32)}`;
	return {
		v: 1,
		kind: "prepare",
		store: loc.store,
		path: loc.path,
		sessionId: loc.sessionId,
		reason: "extension",
		requestedAt: now.toISOString(),
		expectLeafId: leafId,
		...(instr !== undefined ? { instructions: instr } : {}),
		policy: "pi",
		counter: "estimate",
		keepRecentTokens,
		...(piVersion ? { piVersion } : {}),
		id,
	};
}

function sha256hex(s: string): string {
	return createHash("sha256").update(s, "utf8").digest("hex");
}
