// interop/pi/pi branch FILE --to TARGET_ID [--from LEAF_ID] [--token-budget N] [--messages] [--compact]
//
// What /tree navigation (AgentSession.navigateTree) does when it leaves the current leaf (or
// --from) for TARGET_ID with a summary, without an LLM:
//   collectEntriesForBranchSummary(sm, oldLeaf, target) -> entries, commonAncestorId
//   prepareBranchEntries(entries, tokenBudget)           -> messages, fileOps, totalTokens
//     (>= 1.5 honours the context edits among the entries: omitted ones are skipped)
// and where the branch_summary entry goes: navigateTree puts the leaf on the target (on its
// parent for a user or custom message) and calls branchWithSummary there; the harness makes
// that call on its private copy and prints the entry Pi made (parentId, fromId: before 0.84.3
// Pi stores the summary's parent, from 0.84.3 the leaf it left). tokenBudget 0 = no limit (Pi: window - reserve).
// --messages adds Pi's prepared messages themselves (summarizedMessages: what its summary
// request serializes), as `cut --messages` does for a plan.
import {
	collectEntriesForBranchSummary,
	computeFileLists,
	deepEqual,
	HarnessError,
	intArg,
	loadSession,
	BRANCH_EDITS,
	PI_VERSION,
	parseArgs,
	prepareBranchEntries,
	projectContextEntry,
} from "./pi.mjs";

export const USAGE = "usage: interop/pi/pi branch FILE --to TARGET_ID [--from LEAF_ID] [--token-budget N] [--messages] [--compact]";

export async function branchReport(argv) {
	const args = parseArgs(argv, { booleans: ["compact", "messages"], values: ["to", "from", "token-budget"] });
	if (args._.length !== 1 || !args.to) throw new HarnessError("expected a session FILE and --to TARGET_ID", 64);
	const budget = intArg(args["token-budget"], "token-budget") ?? 0;
	const { sm, file } = loadSession(args._[0]);
	if (args.from !== undefined) {
		if (!sm.getEntry(args.from)) throw new HarnessError(`--from ${args.from}: no such entry id`);
		sm.branch(args.from);
	}
	const oldLeafId = sm.getLeafId();
	const target = sm.getEntry(args.to);
	if (!target) throw new HarnessError(`--to ${args.to}: no such entry id`);

	const { entries, commonAncestorId } = collectEntriesForBranchSummary(sm, oldLeafId, args.to);
	const prep = prepareBranchEntries(entries, budget);
	const messageIds = mapBranchMessages(entries, prep.messages);

	const userLike = (target.type === "message" && target.message.role === "user") || target.type === "custom_message";
	const newLeafId = userLike ? (target.parentId ?? null) : args.to;
	let summaryEntry = null;
	if (entries.length > 0) {
		sm.persist = false; // the copy is gone: keep the entry in memory
		const id = sm.branchWithSummary(newLeafId, "(summary)", computeFileLists(prep.fileOps), false);
		const e = sm.getEntry(id);
		summaryEntry = { id, parentId: e.parentId, fromId: e.fromId };
	}
	const result = {
		piVersion: PI_VERSION,
		file,
		oldLeafId,
		targetId: args.to,
		newLeafId,
		commonAncestorId,
		entries: entries.map((e) => e.id),
		tokenBudget: budget,
		messages: messageIds,
		totalTokens: prep.totalTokens,
		fileOps: {
			read: [...prep.fileOps.read],
			written: [...prep.fileOps.written],
			edited: [...prep.fileOps.edited],
			...computeFileLists(prep.fileOps),
		},
		summaryEntry, // null: nothing to summarize, navigateTree only moves the leaf
	};
	if (args.messages) result.summarizedMessages = prep.messages;
	return { result, compact: args.compact };
}

/**
 * Pi walks the entries newest first and keeps a suffix of the ones that give a message (tool
 * results never do; from 1.5, BRANCH_EDITS, it skips omitted ones and projects replaced ones). Match that suffix
 * against Pi's messages from the end, each message deep-equal (or Pi's own object). Returns
 * the entry id of each message; HarnessError(4) when they do not line up.
 */
export function mapBranchMessages(entries, messages) {
	const edits = new Map();
	if (BRANCH_EDITS) for (const e of entries) if (e.type === "context_edit") edits.set(e.targetId, e);
	// Pi applies an edit to a message or custom_message only (its projectContextEntry).
	const editOf = (e) => (e.type === "message" || e.type === "custom_message" ? edits.get(e.id) : undefined);
	const gives = (e) => {
		if (e.type === "message" && e.message.role === "toolResult") return false;
		if (editOf(e)?.replacement === null) return false;
		return e.type === "message" || e.type === "custom_message" || e.type === "branch_summary" || e.type === "compaction";
	};
	const cands = entries.filter(gives);
	if (messages.length > cands.length) throw new HarnessError(`internal: Pi ${PI_VERSION} summarizes ${messages.length} messages, only ${cands.length} entries give one`, 4);
	const used = cands.slice(cands.length - messages.length);
	used.forEach((e, k) => {
		const m = messages[k];
		const edit = editOf(e);
		let ok;
		if (edit) ok = deepEqual(m, projectContextEntry(e, edit)[0]);
		else if (e.type === "message") ok = m === e.message;
		else if (e.type === "custom_message") ok = m.role === "custom" && m.customType === e.customType;
		else if (e.type === "branch_summary") ok = m.role === "branchSummary" && m.summary === e.summary;
		else ok = m.role === "compactionSummary" && m.summary === e.summary;
		if (!ok) throw new HarnessError(`internal: Pi ${PI_VERSION}'s branch message ${k} is not the one of entry ${e.id}`, 4);
	});
	return used.map((e) => e.id);
}
