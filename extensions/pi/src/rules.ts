// Pi's rules that the extension cannot see in what the host Pi exports, by the first release
// that has each (compactor's pi.Behaviour names them; docs/compatibility.md).

/** The first release with each rule. */
const SINCE = {
	/** System messages are prompt state: never summarized, replaced by the compaction's checkpoint. */
	SystemMessages: "0.86.0",
	/** Trailing tool results over keepRecentTokens keep the last cut point, not the first. */
	TrailingToolResultsKeepLastCut: "0.86.0",
	/** Pi checks the threshold after a run's tool results too and compacts in the middle of the run. */
	MidRunCompaction: "0.84.4",
} as const;

export type Rule = keyof typeof SINCE;

/** has reports whether Pi `version` (its VERSION; unknown: the newest) has the rule. */
export function has(version: string | undefined, rule: Rule): boolean {
	if (!version) return true;
	const a = version.split(/[.+-]/).slice(0, 3).map(Number);
	const b = SINCE[rule].split(".").map(Number);
	if (a.some(Number.isNaN)) return true;
	for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] > b[i];
	return !/-/.test(version); // a pre-release of the first release does not have it yet
}
