// compactor's Pi extension: zero-wait compaction.
//
// While the agent works, compactor prepares the summary in the background; when Pi compacts
// (automatically or by /compact), this extension hands Pi that prepared summary through the
// session_before_compact hook, so Pi skips its own summarizer call and appends the compaction
// itself, from its in-memory leaf. Pi is never made worse: whenever nothing valid is ready
// within a short deadline, or compactor cannot be reached, the hook returns nothing and Pi
// compacts as it always does. Nothing here throws into Pi, shows an error, or writes a file.
//
//   session_start          bind the session (src/state.ts)
//   agent_start            a run starts: the pace is measured over working time, from here
//   turn_end               a preparation due (src/trigger.ts)? -> publish a prepare job;
//                          a request in flight? -> has its value landed? (src/preparation.ts)
//   session_before_compact fetch the prepared value (bounded); if its cut lies before Pi's,
//                          ask a worker to bridge it to Pi's cut; check it, return it; with
//                          none valid, for an automatic compaction, ask a worker for the
//                          extract (the previous summary plus extractive notes); else nothing
//                          (src/hook.ts, src/bridge.ts; its report: src/metrics.ts)
//   session_compact        a new cycle starts (the branch has a new compaction)
//   session_compact_failed Pi 1.x: the compaction did not happen (logged)
//   session_shutdown       close the NATS connection
//
// Works in Pi 0.73.1 (@mariozechner/pi-coding-agent) and Pi 1.x (@earendil-works/...): Pi's
// runtime API is imported by the old name, which Pi 1.x maps to itself (src/host.ts). Load it with
// `pi -e extensions/pi/index.ts`, or install extensions/pi as a Pi package (`pi install`).
// Configuration and the contract with compactor are in README.md beside this file.

import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";
import type { FlagValues } from "./src/config.ts";
import { errText } from "./src/debug.ts";
import { beforeCompact } from "./src/hook.ts";
import { turnEnded } from "./src/preparation.ts";
import { bindSession, compacted, newRuntime, shutdown } from "./src/state.ts";

const FLAG_OFF = "compactor-off";
const FLAG_FRACTION = "compactor-prepare-fraction";
const FLAG_DEADLINE = "compactor-deadline-ms";

export default function compactorExtension(pi: ExtensionAPI): void {
	pi.registerFlag(FLAG_OFF, { description: "compactor: do not use prepared summaries (Pi compacts by itself)", type: "boolean" });
	pi.registerFlag(FLAG_FRACTION, { description: "compactor: fraction of a cycle's room that must be summarizable before the first preparation (default 0.05)", type: "string" });
	pi.registerFlag(FLAG_DEADLINE, { description: "compactor: how long the hook waits for a prepared summary, in ms (default 200)", type: "string" });

	const rt = newRuntime();
	const flags = (): FlagValues => {
		const str = (name: string) => {
			const v = pi.getFlag(name);
			return typeof v === "string" ? v : undefined;
		};
		return { off: pi.getFlag(FLAG_OFF) === true, fraction: str(FLAG_FRACTION), deadlineMs: str(FLAG_DEADLINE) };
	};

	pi.on("session_start", (_event, ctx) => bindSession(rt, ctx, flags));
	pi.on("agent_start", (_event, ctx) => {
		try {
			rt.state?.pace.runStarted(ctx.getContextUsage()?.tokens, performance.now());
		} catch (err) {
			rt.log(`agent_start: ${errText(err)}`);
		}
	});
	pi.on("turn_end", (_event, ctx) => turnEnded(rt, ctx));
	pi.on("session_before_compact", (event, ctx) => beforeCompact(rt, event, ctx));
	pi.on("session_compact", (event, ctx) => compacted(rt, event, ctx));
	// Pi 1.x: the compaction failed or was cancelled; the cycle goes on. (Pi 0.73 never emits it.)
	pi.on("session_compact_failed", (ev) => {
		rt.log(
			`session_compact_failed (${ev.reason ?? "reason unknown"}${ev.aborted ? ", aborted" : ""}${ev.fromExtension ? ", with this extension's value" : ""}): ${ev.errorMessage ?? "no message"}`,
		);
	});
	pi.on("session_shutdown", () => shutdown(rt));
}
