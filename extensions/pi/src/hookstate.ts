/**
 * The state of one run of Pi's session_before_compact hook, as the hook (hook.ts) moves it and
 * as its report and debug line (metrics.ts) read it: a module of its own so that neither of
 * the two imports the other for it.
 */
import type { HookReason, HookReport, HookResult, SessionLocation, ValueMaking } from "./session.ts";

/** What one run of the hook has come to so far: what its debug line and its report say. */
export interface HookState {
	/** The debug line's account ("hit (...)", "miss (...)", "stale (...)"). */
	outcome: string;
	/** The report's outcome; undefined: no report (compactor was not asked, or Pi aborted). */
	kind: HookReport["outcome"] | undefined;
	/** What answered Pi. */
	result: HookResult;
	/** Why no preparation answered, in a word ("none": one did). */
	reasonCode: HookReason;
	/** Where compactor finds the session (undefined: in no store, or not looked up). */
	loc: SessionLocation | undefined;
	/** The entries a bridge covered, when the answer was bridged to Pi's cut. */
	bridged: number | undefined;
	/** When the value read was asked for and made, for the debug line. */
	timing: string;
	/** How the summary Pi gets was written (what the value says of itself). */
	making: ValueMaking;
}
