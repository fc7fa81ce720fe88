// The extension's only link to compactor: one NATS connection, opened lazily on first use and
// kept (nats.js reconnects it by itself), through which prepare jobs are published to
// COMPACTOR_JOBS, their result events heard, and prepared values read from the
// COMPACTOR_PREPARED bucket.
// Callers bound every call with withDeadline; a call that outlives its deadline is left to
// finish (or fail) in the background, its result dropped, never an unhandled rejection.

import { readFile } from "node:fs/promises";
import { JetStreamApiError, jetstream, type JetStreamClient } from "@nats-io/jetstream";
import { type KV, Kvm } from "@nats-io/kv";
import {
	connect,
	credsAuthenticator,
	type Msg,
	type NatsConnection,
	type NodeConnectionOptions,
	nkeyAuthenticator,
	PermissionViolationError,
} from "@nats-io/transport-node";
import type { NatsSettings } from "./config.ts";
import { type BridgeReply, type BridgeRequest, ERR_CODE_PENDING, PREPARED_BUCKET, type PrepareJob } from "./session.ts";

/** How a prepare request ended: stored, already stored (same id), or refused because one is pending. */
export type PublishOutcome = "queued" | "duplicate" | "pending";

/** A published prepare job: its outcome and, once stored, its stream sequence (its events' last token). */
export interface Published {
	outcome: PublishOutcome;
	/** The job's sequence in COMPACTOR_JOBS (of the first one, for a duplicate); 0 when pending. */
	seq: number;
}

/** A subscription the caller ends. */
export interface Listening {
	stop(): void;
}

export interface ClientOptions {
	/** Give up opening a connection after this long (nats.js `timeout`). */
	connectTimeoutMs: number;
	/**
	 * After a failed connect, fail fast for this long instead of dialing again; it doubles with
	 * each further failure, up to maxCooldownMs, and resets once a connection is made.
	 */
	cooldownMs: number;
	maxCooldownMs: number;
	/** How long a publish waits for JetStream's acknowledgement. */
	publishTimeoutMs: number;
}

const DEFAULT_OPTIONS: ClientOptions = { connectTimeoutMs: 2000, cooldownMs: 1000, maxCooldownMs: 60_000, publishTimeoutMs: 5000 };

export class CompactorClient {
	readonly #settings: NatsSettings;
	readonly #opts: ClientOptions;
	#nc: NatsConnection | undefined;
	#js: JetStreamClient | undefined;
	#kv: Promise<KV> | undefined;
	#connecting: Promise<NatsConnection> | undefined;
	#failedAt = -Infinity;
	#failures = 0;
	#closed = false;

	constructor(settings: NatsSettings, opts: Partial<ClientOptions> = {}) {
		this.#settings = settings;
		this.#opts = { ...DEFAULT_OPTIONS, ...opts };
	}

	/**
	 * warm opens the connection and binds the bucket in the background, so that the first
	 * session_before_compact does not pay for them. Failures are ignored (and back off).
	 */
	warm(): void {
		if (this.#closed || this.#connecting || (this.#nc && !this.#nc.isClosed() && this.#kv)) return;
		if (this.#coolingDown()) return;
		this.#connection()
			.then(() => this.#bucket())
			.catch(() => {});
	}

	/** publishPrepare publishes a prepare job with its id as Nats-Msg-Id. */
	async publishPrepare(subject: string, job: PrepareJob): Promise<PublishOutcome> {
		return (await this.prepare(subject, job)).outcome;
	}

	/** prepare publishes a prepare job with its id as Nats-Msg-Id, and says where it is stored. */
	async prepare(subject: string, job: PrepareJob): Promise<Published> {
		await this.#connection();
		const js = this.#js as JetStreamClient;
		try {
			const ack = await js.publish(subject, JSON.stringify(job), { msgID: job.id, timeout: this.#opts.publishTimeoutMs });
			return { outcome: ack.duplicate ? "duplicate" : "queued", seq: ack.seq };
		} catch (err) {
			if (err instanceof JetStreamApiError && err.code === ERR_CODE_PENDING) return { outcome: "pending", seq: 0 };
			throw err;
		}
	}

	/**
	 * listen subscribes to subject (core NATS) and hands each message to onMsg until stopped. It
	 * resolves once the server has the subscription, and rejects when the server refuses it
	 * (a PermissionViolationError: the refusal comes before the flush's answer); a refusal
	 * that comes later (a permission changed under a live connection) goes to onRefused.
	 */
	async listen(subject: string, onMsg: (m: Msg) => void, onRefused: (err: unknown) => void): Promise<Listening> {
		const nc = await this.#connection();
		let refused: unknown;
		let settled = false;
		const sub = nc.subscribe(subject, {
			callback: (err, msg) => {
				if (!err) return onMsg(msg);
				if (settled) onRefused(err);
				else refused = err;
			},
		});
		await nc.flush();
		settled = true;
		if (refused !== undefined) throw refused;
		return {
			stop: () => {
				try {
					if (!sub.isClosed()) sub.unsubscribe();
				} catch {
					// the connection is closed: so is the subscription
				}
			},
		};
	}

	/**
	 * getPrepared reads the prepared value under key: its parsed JSON, or undefined when there
	 * is none (never written, deleted or expired). A value that is not JSON throws.
	 */
	async getPrepared(key: string): Promise<unknown> {
		await this.#connection();
		const kv = await this.#bucket();
		const e = await kv.get(key);
		if (!e || e.operation !== "PUT") return undefined;
		return e.json();
	}

	/**
	 * requestBridge asks compactor's workers for the session's preparation extended to Pi's cut
	 * (a core NATS request; one worker of the store answers). It rejects when no worker
	 * listens (at once) or none answers within timeoutMs.
	 */
	async requestBridge(subject: string, req: BridgeRequest, timeoutMs: number): Promise<BridgeReply> {
		const nc = await this.#connection();
		const msg = await nc.request(subject, JSON.stringify(req), { timeout: Math.max(1, Math.floor(timeoutMs)) });
		return msg.json<BridgeReply>();
	}

	/**
	 * report publishes a fire-and-forget message (core NATS, no acknowledgement) when a
	 * connection is open; otherwise it drops it. It never waits and never throws.
	 */
	report(subject: string, data: unknown): void {
		const nc = this.#nc;
		if (this.#closed || !nc || nc.isClosed()) return;
		try {
			nc.publish(subject, JSON.stringify(data));
		} catch {
			// a report is best effort
		}
	}

	/** close ends the connection (and one being opened); later calls fail. */
	async close(): Promise<void> {
		this.#closed = true;
		const nc = this.#nc;
		this.#nc = undefined;
		if (nc && !nc.isClosed()) await nc.close();
	}

	#bucket(): Promise<KV> {
		if (!this.#kv) {
			// open() binds without a round trip; a missing bucket shows up as a failed get.
			// allow_direct: a value is read by a direct get whose subject names its key
			// ($JS.API.DIRECT.GET.KV_COMPACTOR_PREPARED.$KV.COMPACTOR_PREPARED.<store>.<token>), the
			// one request an agent's permissions let through (docs/security.md).
			this.#kv = new Kvm(this.#js as JetStreamClient).open(PREPARED_BUCKET, { allow_direct: true });
			this.#kv.catch(() => {
				this.#kv = undefined;
			});
		}
		return this.#kv;
	}

	#connection(): Promise<NatsConnection> {
		if (this.#closed) return Promise.reject(new Error("compactor client is closed"));
		if (this.#nc && !this.#nc.isClosed()) return Promise.resolve(this.#nc);
		if (this.#connecting) return this.#connecting;
		if (this.#coolingDown()) {
			return Promise.reject(new Error("NATS was unreachable a moment ago; not dialing again yet"));
		}
		const p = this.#dial().then(
			(nc) => {
				if (this.#closed) {
					void nc.close().catch(() => {});
					throw new Error("compactor client is closed");
				}
				this.#nc = nc;
				this.#failures = 0;
				this.#js = jetstream(nc);
				this.#kv = undefined;
				void nc.closed().then(() => {
					if (this.#nc === nc) this.#nc = undefined;
				});
				return nc;
			},
			(err) => {
				this.#failedAt = performance.now();
				this.#failures++;
				throw err;
			},
		);
		this.#connecting = p;
		const clear = () => {
			if (this.#connecting === p) this.#connecting = undefined;
		};
		p.then(clear, clear);
		return p;
	}

	#coolingDown(): boolean {
		if (this.#failures === 0) return false;
		const wait = Math.min(this.#opts.cooldownMs * 2 ** (this.#failures - 1), this.#opts.maxCooldownMs);
		return performance.now() - this.#failedAt < wait;
	}

	async #dial(): Promise<NatsConnection> {
		const s = this.#settings;
		const opts: NodeConnectionOptions = {
			servers: s.url
				.split(",")
				.map((u) => u.trim())
				.filter((u) => u !== ""),
			name: "compactor-pi-extension",
			timeout: this.#opts.connectTimeoutMs,
			reconnect: true,
			maxReconnectAttempts: -1,
			waitOnFirstConnect: false,
		};
		if (s.inboxPrefix) opts.inboxPrefix = s.inboxPrefix;
		if (s.user) {
			opts.user = s.user;
			opts.pass = s.passwordFile ? (await readFile(s.passwordFile, "utf8")).trim() : s.password;
		} else if (s.token || s.tokenFile) {
			opts.token = s.tokenFile ? (await readFile(s.tokenFile, "utf8")).trim() : s.token;
		} else if (s.credsFile) {
			opts.authenticator = credsAuthenticator(await readFile(s.credsFile));
		} else if (s.nkeySeedFile) {
			const seed = (await readFile(s.nkeySeedFile, "utf8")).trim();
			opts.authenticator = nkeyAuthenticator(new TextEncoder().encode(seed));
		}
		if (s.tlsCaFile || s.tlsCertFile || s.tlsKeyFile) {
			opts.tls = { caFile: s.tlsCaFile, certFile: s.tlsCertFile, keyFile: s.tlsKeyFile };
		}
		return connect(opts);
	}
}

export type Deadlined<T> =
	| { ok: true; value: T }
	| { ok: false; reason: "timeout" | "aborted" }
	| { ok: false; reason: "error"; error: unknown };

/**
 * withDeadline waits for p at most ms milliseconds (and not past signal's abort). It never
 * rejects: a late or failed p is reported, and its eventual outcome is swallowed.
 */
export function withDeadline<T>(p: Promise<T>, ms: number, signal?: AbortSignal): Promise<Deadlined<T>> {
	return new Promise((resolve) => {
		let done = false;
		const finish = (r: Deadlined<T>) => {
			if (done) return;
			done = true;
			clearTimeout(timer);
			signal?.removeEventListener("abort", onAbort);
			resolve(r);
		};
		const onAbort = () => finish({ ok: false, reason: "aborted" });
		const timer = setTimeout(() => finish({ ok: false, reason: "timeout" }), Math.max(0, ms));
		if (signal?.aborted) onAbort();
		else signal?.addEventListener("abort", onAbort, { once: true });
		p.then(
			(value) => finish({ ok: true, value }),
			(error) => finish({ ok: false, reason: "error", error }),
		);
	});
}

/**
 * notPermitted says, for an error that is the server's refusal of a subject outside this
 * agent's permissions, what was refused and who may (compactor's words: docs/security.md);
 * undefined for any other error. nats.js rejects a request, a JetStream publish or a KV get
 * at once when the server refuses it.
 */
export function notPermitted(err: unknown, stores: string[]): string | undefined {
	let e: unknown = err;
	for (let i = 0; i < 4 && e instanceof Error; i++) {
		if (e instanceof PermissionViolationError || e.name === "PermissionViolationError") {
			const pe = e as PermissionViolationError;
			const op = pe.operation === "subscription" ? "subscribe" : "publish";
			const who = stores.length > 0 ? `agent of store ${[...stores].sort().join(", ")}` : "agent";
			return `not permitted: ${pe.subject} (${op} refused for role ${who}; see compactor's docs/security.md)`;
		}
		e = (e as { cause?: unknown }).cause;
	}
	return undefined;
}
