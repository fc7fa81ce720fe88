// Driving the real Pi CLI in RPC mode (JSON lines over stdin/stdout) with this extension
// loaded by `-e`, against a FakeModel. The Pi used is the project's Pi harness
// (interop/pi/pi cli, or $PI_HARNESS cli; $PI_VERSION picks the Pi), else the one in node_modules.

import { type ChildProcess, execFile, spawn } from "node:child_process";
import { promisify } from "node:util";
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { EXT_DIR, killAndWait, REPO_ROOT } from "./nats.ts";

export const PROVIDER = "fake";
export const MODEL = "fake-model";

export interface PiWorld {
	/** PI_CODING_AGENT_DIR: models.json and settings.json. */
	agentDir: string;
	/** --session-dir, and the store root compactor mounts. */
	sessionDir: string;
	/** Pi's working directory: the files the model reads. */
	cwd: string;
}

export interface WorldOptions {
	baseUrl: string;
	contextWindow: number;
	reserveTokens: number;
	keepRecentTokens: number;
	files: Record<string, string>;
}

/** makeWorld writes a fresh agent dir (custom provider + compaction settings), session dir and cwd. */
export function makeWorld(o: WorldOptions): PiWorld {
	const root = mkdtempSync(join(tmpdir(), "compactor-pi-ext-world-"));
	const agentDir = join(root, "agent");
	const sessionDir = join(root, "sessions");
	const cwd = join(root, "work");
	for (const d of [agentDir, sessionDir, cwd]) mkdirSync(d, { recursive: true });
	const models = {
		providers: {
			[PROVIDER]: {
				baseUrl: o.baseUrl,
				api: "openai-completions",
				apiKey: "test-key",
				compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
				models: [
					{
						id: MODEL,
						name: "Fake model",
						reasoning: false,
						input: ["text"],
						contextWindow: o.contextWindow,
						maxTokens: 4096,
						cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
					},
				],
			},
		},
	};
	writeFileSync(join(agentDir, "models.json"), JSON.stringify(models, null, 2));
	const settings = { compaction: { enabled: true, reserveTokens: o.reserveTokens, keepRecentTokens: o.keepRecentTokens } };
	writeFileSync(join(agentDir, "settings.json"), JSON.stringify(settings, null, 2));
	for (const [name, text] of Object.entries(o.files)) writeFileSync(join(cwd, name), text);
	return { agentDir, sessionDir, cwd };
}

export interface RpcEvent {
	at: number;
	msg: Record<string, unknown>;
}

function piCommand(): { cmd: string; args: string[] } {
	const harness = process.env.PI_HARNESS ?? resolve(REPO_ROOT, "interop", "pi", "pi");
	if (existsSync(harness)) return { cmd: harness, args: ["cli"] };
	return { cmd: process.execPath, args: [join(EXT_DIR, "node_modules", "@mariozechner", "pi-coding-agent", "dist", "cli.js")] };
}

let version: Promise<string> | undefined;

/** piVersion is the version of the Pi the tests run (what its VERSION says, as the extension sends it). */
export function piVersion(): Promise<string> {
	version ??= (async () => {
		const { cmd, args } = piCommand();
		const out = await promisify(execFile)(cmd, [...args, "--version"], { env: { ...process.env, PI_OFFLINE: "1" } });
		return `${out.stdout}${out.stderr}`.trim().split(/\s+/).pop() ?? "";
	})();
	return version;
}

const running = new Set<PiRpc>();
let stderrFiles = 0;

/** stopAll stops every Pi still running (a test that failed half-way leaves none behind). */
export async function stopAll(): Promise<void> {
	await Promise.all([...running].map((p) => p.stop()));
}

/** A running `pi --mode rpc -e extensions/pi/index.ts`. */
export class PiRpc {
	readonly events: RpcEvent[] = [];
	stderr = "";
	#proc: ChildProcess;
	#buf = "";
	#seq = 0;
	#pending = new Map<string, (msg: Record<string, unknown>) => void>();
	#waiters: Array<{ pred: (e: RpcEvent) => boolean; from: number; resolve: (e: RpcEvent) => void }> = [];

	constructor(world: PiWorld, env: Record<string, string>, extraArgs: string[] = []) {
		const { cmd, args } = piCommand();
		const full = [
			...args,
			"--mode",
			"rpc",
			"--offline",
			"-e",
			join(EXT_DIR, "index.ts"),
			"--provider",
			PROVIDER,
			"--model",
			MODEL,
			"--session-dir",
			world.sessionDir,
			...extraArgs,
		];
		running.add(this);
		this.#proc = spawn(cmd, full, {
			cwd: world.cwd,
			env: { ...process.env, PI_CODING_AGENT_DIR: world.agentDir, PI_OFFLINE: "1", ...env },
			stdio: ["pipe", "pipe", "pipe"],
		});
		this.#proc.stdout?.setEncoding("utf8");
		this.#proc.stdout?.on("data", (d: string) => this.#onData(d));
		this.#proc.stderr?.setEncoding("utf8");
		this.#proc.stderr?.on("data", (d: string) => {
			this.stderr += d;
		});
	}

	#onData(d: string): void {
		this.#buf += d;
		for (;;) {
			const nl = this.#buf.indexOf("\n");
			if (nl < 0) break;
			const line = this.#buf.slice(0, nl).replace(/\r$/, "");
			this.#buf = this.#buf.slice(nl + 1);
			if (!line.trim()) continue;
			let msg: Record<string, unknown>;
			try {
				msg = JSON.parse(line);
			} catch {
				continue;
			}
			const ev = { at: performance.now(), msg };
			if (msg.type === "response" && typeof msg.id === "string" && this.#pending.has(msg.id)) {
				const r = this.#pending.get(msg.id);
				this.#pending.delete(msg.id);
				r?.(msg);
				continue;
			}
			this.events.push(ev);
			const idx = this.events.length - 1;
			this.#waiters = this.#waiters.filter((w) => {
				if (idx >= w.from && w.pred(ev)) {
					w.resolve(ev);
					return false;
				}
				return true;
			});
		}
	}

	/** send writes one command and resolves with its response. */
	send(cmd: Record<string, unknown>, timeoutMs = 60_000): Promise<Record<string, unknown>> {
		const id = `t${++this.#seq}`;
		return new Promise((ok, fail) => {
			const timer = setTimeout(() => {
				this.#pending.delete(id);
				fail(new Error(`no response to ${JSON.stringify(cmd)} in ${timeoutMs} ms; stderr: ${this.stderr.slice(-2000)}`));
			}, timeoutMs);
			this.#pending.set(id, (msg) => {
				clearTimeout(timer);
				ok(msg);
			});
			this.#proc.stdin?.write(`${JSON.stringify({ ...cmd, id })}\n`);
		});
	}

	/** mark is an index to wait for events after. */
	mark(): number {
		return this.events.length;
	}

	/** waitFor resolves with the first event from index `from` on that matches. */
	waitFor(pred: (e: RpcEvent) => boolean, from: number, timeoutMs = 60_000): Promise<RpcEvent> {
		for (let i = from; i < this.events.length; i++) if (pred(this.events[i])) return Promise.resolve(this.events[i]);
		return new Promise((ok, fail) => {
			const timer = setTimeout(() => fail(new Error(`event not seen in ${timeoutMs} ms; stderr: ${this.stderr.slice(-2000)}`)), timeoutMs);
			this.#waiters.push({
				pred,
				from,
				resolve: (e) => {
					clearTimeout(timer);
					ok(e);
				},
			});
		});
	}

	/** prompt sends a user message and waits for the end of the agent's run (and any compaction it triggered). */
	async prompt(message: string): Promise<void> {
		const from = this.mark();
		const r = await this.send({ type: "prompt", message });
		if (r.success !== true) throw new Error(`prompt refused: ${JSON.stringify(r)}`);
		await this.waitFor((e) => e.msg.type === "agent_end", from);
		await this.idle();
	}

	/** idle waits until Pi reports it is not streaming and not compacting. */
	async idle(timeoutMs = 30_000): Promise<void> {
		const until = performance.now() + timeoutMs;
		while (performance.now() < until) {
			const s = await this.send({ type: "get_state" }, 5000);
			const d = s.data as { isStreaming?: boolean; isCompacting?: boolean };
			if (!d.isStreaming && !d.isCompacting) return;
			await new Promise((r) => setTimeout(r, 25));
		}
		throw new Error("Pi did not become idle");
	}

	async state(): Promise<{ sessionFile: string; sessionId: string }> {
		const s = await this.send({ type: "get_state" });
		return s.data as { sessionFile: string; sessionId: string };
	}

	/** hookLines are the extension's debug lines about session_before_compact. */
	hookLines(): string[] {
		return this.stderr.split("\n").filter((l) => l.includes("session_before_compact:"));
	}

	async stop(): Promise<void> {
		running.delete(this);
		// PI_STDERR_DIR=DIR keeps each Pi's stderr (the extension's debug lines) for a look afterwards.
		const dir = process.env.PI_STDERR_DIR;
		if (dir) writeFileSync(join(dir, `pi-${process.pid}-${++stderrFiles}.log`), this.stderr);
		this.#proc.stdin?.end();
		await killAndWait(this.#proc);
	}
}
