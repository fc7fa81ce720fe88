// Prepared values as compactor's `prepare` job will write them, made by hand for the tests:
// the cut comes from the real `compactor plan FILE --json --policy nearest` (built from this
// repository), the summary is made up.

import { execFile } from "node:child_process";
import { mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { REPO_ROOT } from "./nats.ts";

const run = promisify(execFile);
let built: Promise<string> | undefined;

/** compactorBinary is $COMPACTOR_BIN, or ./cmd/compactor built once per test process. */
export function compactorBinary(): Promise<string> {
	if (process.env.COMPACTOR_BIN) return Promise.resolve(process.env.COMPACTOR_BIN);
	built ??= (async () => {
		const dir = join(tmpdir(), "compactor-pi-ext", `bin-${process.pid}`);
		mkdirSync(dir, { recursive: true });
		const bin = join(dir, "compactor");
		await run("go", ["build", "-o", bin, "./cmd/compactor"], { cwd: REPO_ROOT });
		return bin;
	})();
	return built;
}

export interface PlanSettings {
	contextWindow: number;
	reserveTokens: number;
	keepRecentTokens: number;
}

/** The fields of `compactor plan --json` used here. */
export interface Plan {
	prepared: boolean;
	leafId: string;
	firstKeptEntryId: string;
	boundaryStartEntryId: string | null;
	previousCompactionId: string | null;
	messagesToSummarize: string[];
	turnPrefix: string[] | null;
	tokensBefore: number;
	keptTokens: number;
	fileOps: { readFiles: string[] | null; modifiedFiles: string[] | null };
}

/** plan is `compactor plan --json` of the file (policy nearest unless said: "pi" plans exactly as Pi, with its estimate). */
export async function plan(file: string, s: PlanSettings, policy: "nearest" | "pi" = "nearest"): Promise<Plan> {
	const bin = await compactorBinary();
	const args = ["plan", file, "--json", "--policy", policy];
	if (policy === "pi") args.push("--counter", "estimate");
	args.push("--context-window", String(s.contextWindow), "--reserve-tokens", String(s.reserveTokens), "--keep-recent-tokens", String(s.keepRecentTokens));
	// planned by the rules of the Pi under test (the harness's PI_VERSION; compactor's default is the newest)
	if (process.env.PI_VERSION) args.push("--pi-version", process.env.PI_VERSION);
	const { stdout } = await run(bin, args, { maxBuffer: 64 << 20 });
	return JSON.parse(stdout) as Plan;
}

export interface ValueInput {
	store: string;
	path: string;
	sessionId: string;
	summary: string;
	customInstructions?: string;
	settings: PlanSettings;
	/** The job's requestedAt, as a worker copies it into the value. */
	requestedAt?: string;
}

/** valueFromPlan is the COMPACTOR_PREPARED value of the contract for a plan. */
export function valueFromPlan(p: Plan, v: ValueInput): Record<string, unknown> {
	if (!p.prepared) throw new Error("plan: nothing prepared");
	return {
		v: 1,
		store: v.store,
		path: v.path,
		sessionId: v.sessionId,
		leafId: p.leafId,
		firstKeptEntryId: p.firstKeptEntryId,
		previousCompactionId: p.previousCompactionId ?? null,
		boundaryStartEntryId: p.boundaryStartEntryId ?? null,
		summarizedEntryIds: [...(p.messagesToSummarize ?? []), ...(p.turnPrefix ?? [])],
		tokensBefore: p.tokensBefore,
		summary: v.summary,
		details: { readFiles: p.fileOps.readFiles ?? [], modifiedFiles: p.fileOps.modifiedFiles ?? [] },
		keptTokensEstimate: p.keptTokens,
		summaryTokensEstimate: Math.ceil(v.summary.length / 4),
		policy: "nearest",
		counter: "tiktoken",
		settings: { ...v.settings },
		customInstructions: v.customInstructions ?? "",
		...(v.requestedAt ? { requestedAt: v.requestedAt } : {}),
		createdAt: new Date().toISOString(),
		llmInputTokens: 0,
		incremental: false,
		basedOnLeafId: null,
	};
}
