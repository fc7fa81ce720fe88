// The debug line: written to stderr when COMPACTOR_DEBUG is on, dropped otherwise, and the
// words it is written in (times, durations, errors).

import { type Deadlined, notPermitted } from "./client.ts";

export type Log = (msg: string) => void;

/** silent drops every line (the default: nothing here writes unless asked to). */
export const silent: Log = () => {};

/** stderrLog writes each line to stderr, stamped. */
export const stderrLog: Log = (msg) => process.stderr.write(`[compactor] ${new Date().toISOString()} ${msg}\n`);

/** clock is a time of day in ms since the epoch, to the millisecond: "07:27:55.123". */
export function clock(ms: number): string {
	return new Date(ms).toISOString().slice(11, 23);
}

/** secs is a duration in ms as seconds: "1.5 s". */
export function secs(ms: number): string {
	return `${(ms / 1000).toFixed(1)} s`;
}

/** The configured stores' names, for the words of a refusal. */
let storeNames: string[] = [];

/** setStoreNames names the stores a refusal's words cite (the agent's role). */
export function setStoreNames(names: string[]): void {
	storeNames = names;
}

/** errText is an error for the debug log; a refusal by the server reads "not permitted: SUBJECT (...)". */
export function errText(err: unknown): string {
	const refused = notPermitted(err, storeNames);
	if (refused !== undefined) return refused;
	if (err instanceof Error) return err.message;
	return String(err);
}

/** failureText is why a bounded call gave no value: "timeout", "aborted", or its error. */
export function failureText(d: Deadlined<unknown> & { ok: false }): string {
	return d.reason === "error" ? errText(d.error) : d.reason;
}
