// A real nats-server for the tests, built once from the module's own dependency
// (github.com/nats-io/nats-server/v2 in the repository's go.mod) and started on a random
// loopback port with JetStream storing into a temporary directory.

import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { DiscardPolicy, jetstreamManager, RetentionPolicy } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";

const run = promisify(execFile);
export const EXT_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const REPO_ROOT = resolve(EXT_DIR, "..", "..");

let built: Promise<string> | undefined;

/** natsServerBinary is $NATS_SERVER_BIN, or nats-server built (and cached) at go.mod's version. */
export function natsServerBinary(): Promise<string> {
	if (process.env.NATS_SERVER_BIN) return Promise.resolve(process.env.NATS_SERVER_BIN);
	built ??= (async () => {
		const mod = readFileSync(join(REPO_ROOT, "go.mod"), "utf8");
		const version = /github\.com\/nats-io\/nats-server\/v2 (v\S+)/.exec(mod)?.[1] ?? "unknown";
		const dir = join(tmpdir(), "compactor-pi-ext");
		mkdirSync(dir, { recursive: true });
		const bin = join(dir, `nats-server-${version}`);
		if (!existsSync(bin)) {
			const tmp = `${bin}.${process.pid}`;
			await run("go", ["build", "-o", tmp, "github.com/nats-io/nats-server/v2"], { cwd: REPO_ROOT });
			await run("mv", [tmp, bin]);
		}
		return bin;
	})();
	return built;
}

/** freePort asks the kernel for an unused loopback port. */
export async function freePort(): Promise<number> {
	const srv = createServer();
	await new Promise<void>((ok) => srv.listen(0, "127.0.0.1", ok));
	const port = (srv.address() as { port: number }).port;
	await new Promise<void>((ok) => srv.close(() => ok()));
	return port;
}

export interface NatsServer {
	url: string;
	port: number;
	/** A connection of the test itself (streams, KV writes, job inspection). */
	nc: NatsConnection;
	/** The HTTP monitoring endpoint (connz, varz), when started with monitor. */
	monitorUrl?: string;
	stop(): Promise<void>;
}

/**
 * startNats starts nats-server with JetStream on a random port (with conf: that configuration
 * too, which must let a connection without credentials in) and creates compactor's resources.
 */
export async function startNats(opts: { monitor?: boolean; conf?: string } = {}): Promise<NatsServer> {
	const bin = await natsServerBinary();
	const port = await freePort();
	const mport = opts.monitor ? await freePort() : undefined;
	const store = mkdtempSync(join(tmpdir(), "compactor-pi-ext-js-"));
	const args = ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", store];
	if (opts.conf !== undefined) {
		// a configuration (users and their permissions) under the flags above
		writeFileSync(join(store, "server.conf"), opts.conf);
		args.push("-c", join(store, "server.conf"));
	}
	if (mport) args.push("-m", String(mport));
	const proc = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
	let log = "";
	proc.stderr?.on("data", (d) => {
		log += d;
	});
	const url = `nats://127.0.0.1:${port}`;
	const nc = await connectWhenReady(url, proc, () => log);
	await ensureResources(nc);
	let stopped = false;
	return {
		url,
		port,
		nc,
		monitorUrl: mport ? `http://127.0.0.1:${mport}` : undefined,
		async stop() {
			if (stopped) return;
			stopped = true;
			await nc.close().catch(() => {});
			await killAndWait(proc);
			rmSync(store, { recursive: true, force: true });
		},
	};
}

async function connectWhenReady(url: string, proc: ChildProcess, log: () => string): Promise<NatsConnection> {
	const until = Date.now() + 15_000;
	for (;;) {
		if (proc.exitCode !== null) throw new Error(`nats-server exited (${proc.exitCode}): ${log()}`);
		try {
			return await connect({ servers: url, timeout: 1000 });
		} catch (err) {
			if (Date.now() > until) throw new Error(`nats-server did not come up: ${String(err)}\n${log()}`);
			await new Promise((r) => setTimeout(r, 50));
		}
	}
}

export async function killAndWait(proc: ChildProcess): Promise<void> {
	if (proc.exitCode !== null || proc.signalCode !== null) return;
	const exited = new Promise<void>((ok) => proc.once("exit", () => ok()));
	proc.kill("SIGTERM");
	const timer = setTimeout(() => proc.kill("SIGKILL"), 5000);
	await exited;
	clearTimeout(timer);
}

/**
 * ensureResources creates the stream and bucket of the contract as compactor's Go side
 * configures them: COMPACTOR_JOBS a work queue holding one message per subject (a second
 * publish for the same session and kind is refused with err_code 10077), COMPACTOR_PREPARED
 * a KV bucket.
 */
export async function ensureResources(nc: NatsConnection): Promise<void> {
	const jsm = await jetstreamManager(nc);
	await jsm.streams.add({
		name: "COMPACTOR_JOBS",
		subjects: ["compactor.jobs.>"],
		retention: RetentionPolicy.Workqueue,
		max_msgs_per_subject: 1,
		discard: DiscardPolicy.New,
		discard_new_per_subject: true,
		duplicate_window: 120_000_000_000,
	});
	await new Kvm(nc).create("COMPACTOR_PREPARED", { history: 1 });
}

/** A TCP listener that accepts connections and never says anything: a NATS that hangs. */
export async function silentListener(): Promise<{ url: string; close(): Promise<void> }> {
	const sockets = new Set<import("node:net").Socket>();
	const srv: Server = createServer((s) => {
		sockets.add(s);
		s.on("close", () => sockets.delete(s));
		s.on("error", () => {});
	});
	await new Promise<void>((ok) => srv.listen(0, "127.0.0.1", ok));
	const port = (srv.address() as { port: number }).port;
	return {
		url: `nats://127.0.0.1:${port}`,
		async close() {
			for (const s of sockets) s.destroy();
			await new Promise<void>((ok) => srv.close(() => ok()));
		},
	};
}
