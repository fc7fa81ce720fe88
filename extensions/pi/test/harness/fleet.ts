// A fleet under the permissions `compactor auth` prints (docs/security.md): compactor built from
// this checkout, a real nats-server started from the generated configuration (one NATS account
// per store), each account's admin's `compactor setup`, and a real `compactor run` for one store
// with that store's worker's key.

import { type ChildProcess, execFile, spawn } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freePort, killAndWait, natsServerBinary, REPO_ROOT } from "./nats.ts";
import { compactorBinary } from "./prepared.ts";

const run = promisify(execFile);

export interface Fleet {
	url: string;
	/** The nkey seed file of a user (admin-<store>, operator-<store>, worker-<store>, agent-<store>). */
	seed(user: string): string;
	/** The root of a store served by a worker. */
	storeDir(store: string): string;
	/** The worker's log so far. */
	workerLog(): string;
	stop(): Promise<void>;
}

/**
 * startFleet generates the configuration for the stores, starts nats-server from it, sets the
 * fleet up with the admin's key, and serves the first store (a copy of examples/sessions) with
 * its worker's key.
 */
export async function startFleet(stores: string[]): Promise<Fleet> {
	const bin = await compactorBinary();
	const dir = mkdtempSync(join(tmpdir(), "compactor-pi-ext-fleet-"));
	const creds = join(dir, "creds");
	const auth = await run(bin, ["auth", ...stores.flatMap((s) => ["--store", s]), "--credentials", creds]);
	writeFileSync(join(dir, "auth.conf"), auth.stdout);
	const port = await freePort();
	writeFileSync(join(dir, "server.conf"), `host: 127.0.0.1\nport: ${port}\njetstream { store_dir: "${join(dir, "js")}" }\ninclude "auth.conf"\n`);
	const procs: ChildProcess[] = [];
	const server = spawn(await natsServerBinary(), ["-c", join(dir, "server.conf")], { stdio: ["ignore", "ignore", "pipe"] });
	procs.push(server);
	let serverLog = "";
	server.stderr?.on("data", (d) => {
		serverLog += d;
	});
	const url = `nats://127.0.0.1:${port}`;
	const seed = (user: string) => join(creds, `${user}.nk`);
	let workerLog = "";
	const stop = async () => {
		for (const p of procs.reverse()) await killAndWait(p);
		rmSync(dir, { recursive: true, force: true });
	};
	try {
		await listening(port, server, () => serverLog);
		await run(bin, ["setup", "--nats-url", url, "--credentials", creds]);
		const store = stores[0];
		const root = join(dir, "stores", store);
		mkdirSync(root, { recursive: true });
		cpSync(join(REPO_ROOT, "examples", "sessions"), root, { recursive: true });
		const worker = spawn(
			bin,
			["run", "--nats-url", url, "--nkey", seed(`worker-${store}`), "--store", `${store}=${root}`, "--idle", "0", "--context-window", "40000",
				"--keep-recent-tokens", "8000", "--data-dir", join(dir, "data"), "--log-format", "json", "--shutdown-timeout", "1s"],
			{ stdio: ["ignore", "ignore", "pipe"] },
		);
		procs.push(worker);
		await new Promise<void>((ok, fail) => {
			const guard = setTimeout(() => fail(new Error(`worker not ready after 60 s:\n${workerLog}`)), 60_000);
			worker.stderr?.on("data", (d) => {
				workerLog += d;
				if (workerLog.includes("compactor pipeline ready")) {
					clearTimeout(guard);
					ok();
				}
			});
			worker.once("exit", (code) => {
				clearTimeout(guard);
				fail(new Error(`worker exited (${code}):\n${workerLog}`));
			});
		});
	} catch (err) {
		await stop();
		throw err;
	}
	return { url, seed, storeDir: (s) => join(dir, "stores", s), workerLog: () => workerLog, stop };
}

/** listening waits until the server accepts TCP connections (no anonymous NATS client is let in). */
async function listening(port: number, proc: ChildProcess, log: () => string): Promise<void> {
	const until = Date.now() + 15_000;
	for (;;) {
		if (proc.exitCode !== null) throw new Error(`nats-server exited (${proc.exitCode}): ${log()}`);
		const up = await new Promise<boolean>((ok) => {
			const s = createConnection({ host: "127.0.0.1", port }, () => {
				s.destroy();
				ok(true);
			});
			s.on("error", () => ok(false));
		});
		if (up) return;
		if (Date.now() > until) throw new Error(`nats-server did not listen: ${log()}`);
		await new Promise((r) => setTimeout(r, 50));
	}
}
