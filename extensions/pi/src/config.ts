// Configuration of the extension: where compactor's NATS is, which session stores compactor
// mounts, and the knobs of the prepare/fetch route. Everything comes from the environment
// (the same variables the Go workers read), optionally overridden by Pi extension flags.
// Nothing here throws: a bad value falls back to its default and is reported through the
// returned `problems`, which the extension logs at debug level only.

import { accessSync, constants, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

/** A session store: a name that is a subject token, and its root directory. */
export interface Store {
	name: string;
	dir: string;
}

/** How to reach NATS. Secrets live here only; they are never logged. */
export interface NatsSettings {
	url: string;
	user?: string;
	password?: string;
	/** A file holding the password or the token (its content, trimmed): no secret in the environment. */
	passwordFile?: string;
	token?: string;
	tokenFile?: string;
	credsFile?: string;
	nkeySeedFile?: string;
	tlsCaFile?: string;
	tlsCertFile?: string;
	tlsKeyFile?: string;
	/**
	 * Where replies come. Unset: _INBOX_agent_<first store in sorted order> (agentInboxPrefix), the
	 * inbox `compactor auth` permits this store's agent; docs/security.md.
	 */
	inboxPrefix?: string;
}

export interface Config {
	/** false when switched off by COMPACTOR_EXTENSION=off or --compactor-off. */
	enabled: boolean;
	stores: Store[];
	nats: NatsSettings;
	/**
	 * A cycle's first preparation is asked for once this fraction of the cycle's room (Pi's
	 * threshold minus what it keeps) is summarizable (src/trigger.ts).
	 */
	prepareFraction: number;
	/** A top-up is asked for when the context grew by this fraction of the room since the cycle's first request. */
	prepareStep: number;
	/** How long a preparation is taken to take until one has been measured, in milliseconds. */
	prepareLatencyMs: number;
	/** How long session_before_compact may wait for the prepared value, in milliseconds. */
	deadlineMs: number;
	/**
	 * With no valid preparation, an automatic compaction (Pi 1.x's reason threshold or
	 * overflow) is answered from the previous summary plus extractive notes, made by a worker.
	 */
	extract: boolean;
	/** How long the hook waits for that extract, in milliseconds, after the deadline above. */
	extractDeadlineMs: number;
	/** Write debug lines to stderr. */
	debug: boolean;
	/** What was wrong in the environment (each fell back to a default). */
	problems: string[];
}

export const DEFAULT_NATS_URL = "nats://127.0.0.1:4222";
export const DEFAULT_PREPARE_FRACTION = 0.05;
export const DEFAULT_PREPARE_STEP = 0.25;
export const DEFAULT_PREPARE_LATENCY_MS = 30_000;
export const DEFAULT_DEADLINE_MS = 200;
export const DEFAULT_EXTRACT_DEADLINE_MS = 1500;
export const DEFAULT_STORE_NAME = "default";

/** Values given as Pi extension flags (--compactor-*); undefined when not given. */
export interface FlagValues {
	off?: boolean;
	fraction?: string;
	step?: string;
	deadlineMs?: string;
	stores?: string;
	natsUrl?: string;
}

type Env = Record<string, string | undefined>;

/**
 * loadConfig reads the environment. agentDir is Pi's agent directory: with no
 * COMPACTOR_STORES, the store "default" is Pi's own session root (<agentDir>/sessions), which
 * is what a compactor worker watching Pi's default location mounts.
 */
export function loadConfig(env: Env, agentDir: string, flags: FlagValues = {}): Config {
	const problems: string[] = [];
	const first = firstOf(env);

	const switch_ = (first("COMPACTOR_EXTENSION") ?? "on").trim().toLowerCase();
	const enabled = !(flags.off === true || ["off", "0", "false", "no", "disabled"].includes(switch_));

	const storesSpec = flags.stores ?? first("COMPACTOR_STORES") ?? `${DEFAULT_STORE_NAME}=${join(agentDir, "sessions")}`;
	const { stores, errors } = parseStores(storesSpec);
	for (const e of errors) problems.push(`COMPACTOR_STORES: ${e}`);

	const nats = natsSettings(first, flags);
	const timing = readTiming(first, flags, problems);
	const off = (raw: string | undefined) => raw !== undefined && ["0", "false", "no", "off"].includes(raw.trim().toLowerCase());
	const extract = !off(first("COMPACTOR_EXTRACT"));
	const debugRaw = (first("COMPACTOR_DEBUG") ?? "").trim().toLowerCase();
	const debug = debugRaw !== "" && !["0", "false", "no", "off"].includes(debugRaw);

	return { enabled, stores, nats, ...timing, extract, debug, problems };
}

/** A lookup of the first of several environment variables that is set and not empty. */
type First = (...keys: string[]) => string | undefined;

function firstOf(env: Env): First {
	return (...keys) => {
		for (const k of keys) {
			const v = env[k];
			if (v !== undefined && v !== "") return v;
		}
		return undefined;
	};
}

/** natsSettings reads how to reach NATS (COMPACTOR_NATS_*, else the NATS CLI's NATS_*). */
function natsSettings(first: First, flags: FlagValues): NatsSettings {
	const nats: NatsSettings = {
		url: flags.natsUrl ?? first("COMPACTOR_NATS_URL", "NATS_URL") ?? DEFAULT_NATS_URL,
		user: first("COMPACTOR_NATS_USER", "NATS_USER"),
		password: first("COMPACTOR_NATS_PASSWORD", "NATS_PASSWORD"),
		passwordFile: first("COMPACTOR_NATS_PASSWORD_FILE"),
		token: first("COMPACTOR_NATS_TOKEN", "NATS_TOKEN"),
		tokenFile: first("COMPACTOR_NATS_TOKEN_FILE"),
		credsFile: first("COMPACTOR_NATS_CREDS", "NATS_CREDS"),
		nkeySeedFile: first("COMPACTOR_NATS_NKEY", "NATS_NKEY"),
		tlsCaFile: first("COMPACTOR_NATS_TLS_CA", "NATS_CA"),
		tlsCertFile: first("COMPACTOR_NATS_TLS_CERT", "NATS_CERT"),
		tlsKeyFile: first("COMPACTOR_NATS_TLS_KEY", "NATS_KEY"),
		inboxPrefix: first("COMPACTOR_NATS_INBOX_PREFIX"),
	};
	if (flags.natsUrl === undefined && first("COMPACTOR_NATS_URL", "NATS_URL") === undefined) {
		localService(nats, first("COMPACTOR_DATA_DIR") ?? join(homedir(), ".compactor"));
	}
	return nats;
}

type Timing = Pick<Config, "prepareFraction" | "prepareStep" | "prepareLatencyMs" | "deadlineMs" | "extractDeadlineMs">;

/** readTiming reads the trigger's knobs and the deadlines; a bad value is reported and its default used. */
function readTiming(first: First, flags: FlagValues, problems: string[]): Timing {
	const num = (name: string, raw: string | undefined, def: number, ok: (n: number) => boolean): number => {
		if (raw === undefined || raw.trim() === "") return def;
		const n = Number(raw);
		if (!Number.isFinite(n) || !ok(n)) {
			problems.push(`${name}=${JSON.stringify(raw)} is not valid; using ${def}`);
			return def;
		}
		return n;
	};
	const fraction = (n: number) => n > 0 && n <= 1;
	const deadline = (n: number) => n >= 0 && n <= 60_000;
	return {
		prepareFraction: num("COMPACTOR_PREPARE_FRACTION", flags.fraction ?? first("COMPACTOR_PREPARE_FRACTION"), DEFAULT_PREPARE_FRACTION, fraction),
		prepareStep: num("COMPACTOR_PREPARE_STEP", flags.step ?? first("COMPACTOR_PREPARE_STEP"), DEFAULT_PREPARE_STEP, fraction),
		prepareLatencyMs: num("COMPACTOR_PREPARE_LATENCY_MS", first("COMPACTOR_PREPARE_LATENCY_MS"), DEFAULT_PREPARE_LATENCY_MS, (n) => n > 0 && n <= 600_000),
		deadlineMs: num("COMPACTOR_PREPARE_DEADLINE_MS", flags.deadlineMs ?? first("COMPACTOR_PREPARE_DEADLINE_MS"), DEFAULT_DEADLINE_MS, deadline),
		extractDeadlineMs: num("COMPACTOR_EXTRACT_DEADLINE_MS", first("COMPACTOR_EXTRACT_DEADLINE_MS"), DEFAULT_EXTRACT_DEADLINE_MS, deadline),
	};
}

/**
 * parseStores reads "name=DIR,name2=DIR2" as the Go CLI does: parts are split on ',' or ';'
 * and trimmed, names must be subject tokens (ASCII letters, digits, '-', '_', at most 64).
 * A bare DIR is refused, as the CLI refuses it: jobs carry the store's name, which must be
 * the one the workers serve. Where the CLI refuses the whole variable, the extension (which
 * must not fail Pi) skips the bad parts and reports them.
 */
export function parseStores(spec: string): { stores: Store[]; errors: string[] } {
	const stores: Store[] = [];
	const errors: string[] = [];
	for (const raw of spec.split(/[,;]/)) {
		const part = raw.trim();
		if (part === "") continue;
		const eq = part.indexOf("=");
		if (eq < 0) {
			errors.push(`store ${JSON.stringify(part)}: want NAME=DIR (for example ${DEFAULT_STORE_NAME}=${part})`);
			continue;
		}
		const name = part.slice(0, eq);
		const dir = part.slice(eq + 1);
		const bad = storeNameProblem(name);
		if (bad) {
			errors.push(`store ${JSON.stringify(part)}: ${bad}`);
			continue;
		}
		if (dir === "") {
			errors.push(`store ${JSON.stringify(part)}: directory is empty`);
			continue;
		}
		stores.push({ name, dir });
	}
	return { stores, errors };
}

function storeNameProblem(name: string): string | undefined {
	if (name === "") return "store name is empty";
	if (name.length > 64) return "store name is longer than 64 characters";
	if (!/^[A-Za-z0-9_-]+$/.test(name)) return "only ASCII letters, digits, '-' and '_' are allowed";
	return undefined;
}

/**
 * localService completes the settings of a NATS given by no URL as the Go clients do: the
 * address of the `compactor run` on this machine (its data directory's service.json, whose
 * clientUrl may be a port of its choosing), its TLS certificate as the CA, and its generated
 * token (nats.token, readable by its owner only) when no credentials are given.
 */
export function localService(n: NatsSettings, dataDir: string): void {
	try {
		const info = JSON.parse(readFileSync(join(dataDir, "service.json"), "utf8")) as { clientUrl?: unknown; tlsCert?: unknown };
		if (typeof info.clientUrl === "string" && info.clientUrl !== "") n.url = info.clientUrl;
		if (typeof info.tlsCert === "string" && info.tlsCert !== "" && !n.tlsCaFile) n.tlsCaFile = info.tlsCert;
	} catch {
		// no service running here: the default URL
	}
	if (n.user || n.token || n.tokenFile || n.credsFile || n.nkeySeedFile) return;
	const token = join(dataDir, "nats.token");
	try {
		accessSync(token, constants.R_OK);
		n.tokenFile = token;
	} catch {
		// none, or not ours to read
	}
}

/** agentInboxPrefix is the inbox `compactor auth` permits an agent of these stores: the first in sorted order's. */
export function agentInboxPrefix(stores: Store[]): string {
	const names = stores.map((s) => s.name).sort();
	return names.length > 0 ? `_INBOX_agent_${names[0]}` : "_INBOX_agent";
}

/** describeNats says where NATS is and which kind of auth is set, without any secret. */
export function describeNats(n: NatsSettings): string {
	const auth: string[] = [];
	if (n.user) auth.push("user");
	if (n.token || n.tokenFile) auth.push("token");
	if (n.nkeySeedFile) auth.push("nkey");
	if (n.credsFile) auth.push("creds");
	if (n.tlsCaFile || n.tlsCertFile) auth.push("tls");
	// credentials embedded in the URL (nats://user:pass@host) are masked
	const url = n.url.replace(/^([a-z][a-z0-9+.-]*:\/\/)?[^/@]*@/i, "$1***@");
	return `${url} auth=${auth.join(",") || "none"}`;
}

/** Pi's compaction settings that the extension needs before Pi hands them to a hook. */
export interface PiCompactionSettings {
	enabled: boolean;
	reserveTokens: number;
	keepRecentTokens: number;
}

export const PI_DEFAULT_COMPACTION: PiCompactionSettings = { enabled: true, reserveTokens: 16384, keepRecentTokens: 20000 };

/**
 * readPiCompactionSettings reads the "compaction" settings as Pi resolves them: the global
 * <agentDir>/settings.json overlaid key by key by the project's <cwd>/.pi/settings.json, with
 * Pi's defaults for what neither sets. Read-only (Pi's own SettingsManager takes a lock file
 * to read, which this extension must not create); a missing or unreadable file counts as empty.
 */
export function readPiCompactionSettings(cwd: string, agentDir: string): PiCompactionSettings {
	const part = (file: string): Record<string, unknown> => {
		try {
			const c = (JSON.parse(readFileSync(file, "utf8")) as { compaction?: unknown }).compaction;
			return typeof c === "object" && c !== null && !Array.isArray(c) ? (c as Record<string, unknown>) : {};
		} catch {
			return {};
		}
	};
	const merged = { ...part(join(agentDir, "settings.json")), ...part(join(cwd, ".pi", "settings.json")) };
	const num = (x: unknown, d: number) => (typeof x === "number" && Number.isFinite(x) ? x : d);
	return {
		enabled: typeof merged.enabled === "boolean" ? merged.enabled : PI_DEFAULT_COMPACTION.enabled,
		reserveTokens: num(merged.reserveTokens, PI_DEFAULT_COMPACTION.reserveTokens),
		keepRecentTokens: num(merged.keepRecentTokens, PI_DEFAULT_COMPACTION.keepRecentTokens),
	};
}
