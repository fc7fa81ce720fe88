// interop/pi/pi cut FILE [--keep-recent-tokens N] [--reserve-tokens N] [--context-window N]
//                        [--settings SETTINGS.json] [--model PROVIDER/MODEL_ID] [--leaf ID]
//                        [--per-entry] [--messages] [--compact] [--strict]
//
// Pi's compaction preparation, as /compact and auto-compaction call it:
// prepareCompaction(sm.getBranch(), settings), without an LLM. Settings: Pi's defaults, then
// the compaction block of --settings resolved by Pi's SettingsManager for --model (default:
// the session's model; 1.6 applies compaction.modelOverrides["provider/modelId"]), then the
// flags. Pi returns messages; the harness maps them back to entry ids, exactly or not at all
// (exit 4). Indices (firstKeptEntryIndex, turnStartIndex, boundaryStartIndex) are positions
// in the path (getBranch()), for every version.
import {
	applyLeaf,
	compactionSettings,
	computeFileLists,
	deepEqual,
	ENTRY_MESSAGES,
	entryType,
	estimateContextTokens,
	estimateProjectedContextTokens,
	estimateTokens,
	findCutPoint,
	getLastAssistantUsage,
	HarnessError,
	intArg,
	loadSession,
	PI_VERSION,
	PROJECTED,
	parseArgs,
	prepareCompaction,
	project,
	SYSTEM_MESSAGES,
	sessionEntryToContextMessages,
	shouldCompact,
} from "./pi.mjs";

export const USAGE =
	"usage: interop/pi/pi cut FILE [--keep-recent-tokens N] [--reserve-tokens N] [--context-window N] [--settings SETTINGS.json] [--model PROVIDER/MODEL_ID] [--leaf ID] [--per-entry] [--messages] [--compact] [--strict]";

const fail = (what) => {
	throw new HarnessError(`internal: cannot map Pi ${PI_VERSION}'s plan back to entries: ${what}`, 4);
};

export async function cutReport(argv) {
	const opts = parseCutArgs(argv);
	const { sm, file, diagnostics } = loadSession(opts.file);
	applyLeaf(sm, opts.leaf);
	const path = sm.getBranch();
	let model = opts.model;
	if (opts.settingsFile && !model) model = sm.buildSessionContext().model ?? undefined; // the agent resumes with the session's model
	const settings = compactionSettings({ settingsFile: opts.settingsFile, model, keepRecentTokens: opts.keep, reserveTokens: opts.reserve });

	const prep = prepareCompaction(path, settings);
	const proj = project(path);

	const result = { piVersion: PI_VERSION, file, leafId: sm.getLeafId(), settings };
	if (opts.settingsFile) result.model = model ? `${model.provider}/${model.modelId}` : null;
	result.pathLength = path.length;
	result.prepared = prep !== undefined;
	if (!prep) result.reason = notPreparedReason(path);
	else Object.assign(result, planFields(prep, path, settings, proj, opts.messages));

	// What the threshold check compares with the window: 1.6 estimates the projection (and
	// trusts usage only after the latest context edit or compaction); 0.73 the context.
	const estimate = PROJECTED ? estimateProjectedContextTokens(proj, path) : estimateContextTokens(proj.messages);
	result.contextEstimate = estimate;
	result.lastAssistantUsage = getLastAssistantUsage(path) ?? null;
	if (opts.contextWindow !== undefined) {
		result.contextWindow = opts.contextWindow;
		result.shouldCompact = shouldCompact(estimate.tokens, opts.contextWindow, settings);
	}
	if (opts.perEntry) result.perEntry = perEntryTokens(path, proj);
	if (opts.strict && diagnostics.warnings.length) throw new HarnessError(`--strict: ${diagnostics.warnings.join("; ")}`, 3);
	result.diagnostics = diagnostics;
	return { result, compact: opts.compact };
}

// parseCutArgs reads cut's command line into the options cutReport works from.
function parseCutArgs(argv) {
	const args = parseArgs(argv, {
		booleans: ["per-entry", "messages", "compact", "strict"],
		values: ["keep-recent-tokens", "reserve-tokens", "context-window", "leaf", "settings", "model"],
	});
	if (args._.length !== 1) throw new HarnessError("expected exactly one session FILE", 64);
	let model;
	if (args.model !== undefined) {
		const slash = args.model.indexOf("/");
		if (slash <= 0 || slash === args.model.length - 1) throw new HarnessError(`--model ${args.model}: want PROVIDER/MODEL_ID`, 64);
		model = { provider: args.model.slice(0, slash), modelId: args.model.slice(slash + 1) };
	}
	return {
		file: args._[0],
		model,
		keep: intArg(args["keep-recent-tokens"], "keep-recent-tokens"),
		reserve: intArg(args["reserve-tokens"], "reserve-tokens"),
		contextWindow: intArg(args["context-window"], "context-window"),
		leaf: args.leaf,
		settingsFile: args.settings,
		perEntry: args["per-entry"],
		messages: args.messages,
		compact: args.compact,
		strict: args.strict,
	};
}

// notPreparedReason says why Pi prepared nothing for the branch `path`.
function notPreparedReason(path) {
	if (path.length > 0 && path[path.length - 1].type === "compaction") return "last entry on the branch is a compaction (Pi: 'Already compacted')";
	if (path.length === 0) return "no entry with an id at the cut point (empty branch / needs migration)";
	return "nothing to summarize before the cut point (Pi: 'Nothing to compact (session too small)')";
}

// planFields is Pi's preparation in the report's terms: the cut, the entries summarized and the
// file lists, with the messages themselves when `withMessages`.
function planFields(prep, path, settings, proj, withMessages) {
	const plan = planEntries(prep, path, settings, proj);
	const fileLists = computeFileLists(prep.fileOps);
	const fields = {
		firstKeptEntryId: prep.firstKeptEntryId,
		firstKeptEntryIndex: plan.firstKeptEntryIndex,
		isSplitTurn: prep.isSplitTurn,
		turnStartIndex: plan.turnStartIndex,
		turnStartEntryId: plan.turnStartIndex >= 0 ? path[plan.turnStartIndex].id : null,
		tokensBefore: prep.tokensBefore,
		boundaryStartIndex: plan.boundaryStartIndex,
		boundaryStartEntryId: path[plan.boundaryStartIndex]?.id ?? null,
		previousCompactionId: plan.previousCompactionId,
		previousSummary: prep.previousSummary ?? null,
		messagesToSummarize: plan.messagesToSummarize,
		turnPrefix: plan.turnPrefix,
		fileOps: {
			read: [...prep.fileOps.read],
			written: [...prep.fileOps.written],
			edited: [...prep.fileOps.edited],
			readFiles: fileLists.readFiles, // what compact() stores in CompactionEntry.details
			modifiedFiles: fileLists.modifiedFiles,
		},
	};
	if (plan.projected) fields.projected = plan.projected;
	if (withMessages) {
		fields.messagesToSummarizeMessages = prep.messagesToSummarize;
		fields.turnPrefixMessages = prep.turnPrefixMessages;
	}
	return fields;
}

// perEntryTokens is what the cut walk counts for each path entry (null: not counted at all).
// >= 0.87: what the entry puts into the projection; 0.80.6 .. 0.86: its context messages
// (sessionEntryToContextMessages); older: a message entry's message.
function perEntryTokens(path, proj) {
	const counted = new Map();
	const sum = (msgs) => msgs.reduce((n, m) => n + estimateTokens(m), 0);
	if (PROJECTED) for (const p of proj.entries) if (p.messages.length) counted.set(p.sourceEntry, sum(p.messages));
	const tokensOf = (e) => {
		if (PROJECTED) return counted.get(e) ?? null;
		if (ENTRY_MESSAGES) {
			const msgs = sessionEntryToContextMessages(e);
			return msgs.length ? sum(msgs) : null;
		}
		return e.type === "message" ? estimateTokens(e.message) : null;
	};
	return path.map((e, index) => ({ index, id: e.id, type: entryType(e), tokens: tokensOf(e) }));
}

/**
 * Pi's preparation `prep` of `path` (prepareCompaction(path, settings)) in entries:
 * {firstKeptEntryIndex, turnStartIndex, boundaryStartIndex, previousCompactionId,
 * messagesToSummarize, turnPrefix} (ids, one per message), and for 1.6 `projected`. Exact or
 * HarnessError(4). `proj` is project(path), when the caller has it.
 */
export function planEntries(prep, path, settings, proj = project(path)) {
	if (!PROJECTED) return mapRaw(prep, path, settings);
	const pathIndex = new Map(path.map((e, i) => [e, i]));
	const indexOf = (e) => {
		const i = pathIndex.get(e);
		if (i === undefined) fail(`entry ${e.id} of the projection is not on the path`);
		return i;
	};
	return mapProjected(prep, proj, indexOf);
}

/**
 * Before 0.87: prepareCompaction works on the path itself; findCutPoint with the same bounds
 * gives the indices, and the messages are the entries' own (before 0.80.6: the very objects).
 */
function mapRaw(prep, path, settings) {
	let prev = -1;
	for (let i = path.length - 1; i >= 0; i--)
		if (path[i].type === "compaction") {
			prev = i;
			break;
		}
	let boundaryStart = 0;
	if (prev >= 0) {
		const k = path.findIndex((e) => e.id === path[prev].firstKeptEntryId);
		boundaryStart = k >= 0 ? k : prev + 1;
	}
	const cut = findCutPoint(path, boundaryStart, path.length, settings.keepRecentTokens);
	if (path[cut.firstKeptEntryIndex]?.id !== prep.firstKeptEntryId || cut.isSplitTurn !== prep.isSplitTurn)
		fail("findCutPoint() disagrees with prepareCompaction()");
	// The message an entry gives a summary: before 0.80.6 a message, custom_message or
	// branch_summary entry gives one, made from the entry; from 0.80.6 the first of the entry's
	// context messages (sessionEntryToContextMessages), a compaction none, and from 0.86 a
	// system message none (prompt state, which the compaction's checkpoint carries).
	const summarized = (e) => {
		if (!ENTRY_MESSAGES) return e.type === "message" || e.type === "custom_message" || e.type === "branch_summary";
		if (e.type === "compaction") return false;
		const m = sessionEntryToContextMessages(e)[0];
		return m !== undefined && !(SYSTEM_MESSAGES && m.role === "system");
	};
	const ids = (from, to, msgs, label) => {
		const entries = path.slice(from, to).filter(summarized);
		if (entries.length !== msgs.length) fail(`${label} has ${msgs.length} messages, entries [${from},${to}) yield ${entries.length}`);
		entries.forEach((e, k) => {
			const same = ENTRY_MESSAGES
				? deepEqual(sessionEntryToContextMessages(e)[0], msgs[k])
				: e.type === "message"
					? e.message === msgs[k]
					: msgs[k] && msgs[k].timestamp === new Date(e.timestamp).getTime();
			if (!same) fail(`${label}[${k}] is not the message of entry ${e.id}`);
		});
		return entries.map((e) => e.id);
	};
	const historyEnd = prep.isSplitTurn ? cut.turnStartIndex : cut.firstKeptEntryIndex;
	return {
		firstKeptEntryIndex: cut.firstKeptEntryIndex,
		turnStartIndex: cut.turnStartIndex,
		boundaryStartIndex: boundaryStart,
		previousCompactionId: prev >= 0 ? path[prev].id : null,
		messagesToSummarize: ids(boundaryStart, historyEnd, prep.messagesToSummarize, "messagesToSummarize"),
		turnPrefix: prep.isSplitTurn ? ids(cut.turnStartIndex, cut.firstKeptEntryIndex, prep.turnPrefixMessages, "turnPrefixMessages") : [],
	};
}

/**
 * 1.6: prepareCompaction works on buildSessionProjection(path): its messages are projected
 * (edited ones are new objects, system messages dropped) and no index comes back. The
 * projection's entries are aligned in order with Pi's message lists, each message checked
 * for deep equality, from the boundary Pi uses (after the latest compaction, which the
 * projection puts first); the turn start is the first entry of the prefix, the first kept
 * entry the one with Pi's id right after the span. Anything that does not line up exactly fails.
 */
function mapProjected(prep, proj, indexOf) {
	const P = proj.entries;
	const summarizable = (p) => (p.sourceEntry.type === "compaction" ? [] : p.messages.filter((m) => m.role !== "system"));
	const prevIdx = P.findIndex((p) => p.sourceEntry.type === "compaction" && p.messages.length > 0);
	const boundary = prevIdx >= 0 ? prevIdx + 1 : 0;
	const nextWithMessages = (from) => {
		let j = from;
		while (j < P.length && summarizable(P[j]).length === 0) j++;
		return j;
	};
	// Consume `msgs` from entry `from` on; returns [ids, index after the last entry used].
	const consume = (from, msgs, label) => {
		const ids = [];
		let i = from;
		let k = 0;
		while (k < msgs.length) {
			if (i >= P.length) fail(`${label}: ${msgs.length - k} message(s) left after the last projected entry`);
			const ms = summarizable(P[i]);
			for (const m of ms) {
				if (k >= msgs.length) fail(`${label} ends inside the messages of entry ${P[i].sourceEntry.id}`);
				if (!deepEqual(m, msgs[k])) fail(`${label}[${k}] does not equal the projected message of entry ${P[i].sourceEntry.id}`);
				ids.push(P[i].sourceEntry.id);
				k++;
			}
			i++;
		}
		return [ids, i];
	};
	const [history, afterHistory] = consume(boundary, prep.messagesToSummarize, "messagesToSummarize");
	let turnStart = -1;
	let turnPrefix = [];
	let afterSpan = afterHistory;
	if (prep.isSplitTurn) {
		turnStart = nextWithMessages(afterHistory);
		if (turnStart >= P.length) fail("split turn without a turn-start entry after the summarized span");
		[turnPrefix, afterSpan] = consume(turnStart, prep.turnPrefixMessages, "turnPrefixMessages");
	}
	const last = Math.min(nextWithMessages(afterSpan), P.length - 1);
	const kept = [];
	for (let j = afterSpan; j <= last; j++) if (P[j].sourceEntry.id === prep.firstKeptEntryId) kept.push(j);
	if (kept.length !== 1)
		fail(`${kept.length} entries with the first kept id ${prep.firstKeptEntryId} right after the summarized span (projected ${afterSpan}..${last})`);
	const firstKept = kept[0];
	const boundaryEntry = P[boundary]?.sourceEntry;
	return {
		firstKeptEntryIndex: indexOf(P[firstKept].sourceEntry),
		turnStartIndex: turnStart >= 0 ? indexOf(P[turnStart].sourceEntry) : -1,
		boundaryStartIndex: boundaryEntry ? indexOf(boundaryEntry) : indexOf(P[P.length - 1].sourceEntry) + 1,
		previousCompactionId: prevIdx >= 0 ? P[prevIdx].sourceEntry.id : null,
		messagesToSummarize: history,
		turnPrefix,
		// The same plan in the projection's positions, and which planned messages Pi saw edited.
		projected: {
			length: P.length,
			boundaryStartIndex: boundary,
			firstKeptIndex: firstKept,
			turnStartIndex: turnStart,
			replaced: [...history, ...turnPrefix].filter((id, k) => {
				const msg = k < history.length ? prep.messagesToSummarize[k] : prep.turnPrefixMessages[k - history.length];
				const src = P.find((p) => p.sourceEntry.id === id).sourceEntry;
				return src.type === "message" && src.message !== msg;
			}),
		},
	};
}
