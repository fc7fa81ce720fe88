// interop/pi/pi context FILE [--leaf ID|null] [--llm] [--entries] [--projection] [--compact] [--strict]
//
// What the selected Pi builds from a session file (opened on a private copy):
//   leafId          SessionManager.getLeafId() (after loading: the last line's entry)
//   pathIds         getBranch() ids, root to leaf, every entry type; pathTypes their types
//   context         buildSessionContext() = {messages, thinkingLevel, model}, Pi's own object
//   messageEntryIds for each context message, the id of the entry it comes from
//                   (1.6: the projection's sourceEntry; 0.73: matched by identity/equality)
//   entryCount      getEntries().length (the header is not counted)
//   header, sessionName, labels {id: label}, diagnostics (what Pi accepts silently)
// --llm adds convertToLlm(messages); --entries the raw path entries; --projection (1.6) the
// projection: for each context entry its id, type and message count, and the context edits
// in force.
import {
	applyLeaf,
	convertToLlm,
	deepEqual,
	entryType,
	HarnessError,
	loadSession,
	PI_VERSION,
	PROJECTED,
	parseArgs,
	project,
} from "./pi.mjs";

export const USAGE = "usage: interop/pi/pi context FILE [--leaf ID|null] [--llm] [--entries] [--projection] [--compact] [--strict]";

export async function contextReport(argv) {
	const args = parseArgs(argv, {
		booleans: ["llm", "entries", "projection", "compact", "strict"],
		values: ["leaf"],
	});
	if (args._.length !== 1) throw new HarnessError("expected exactly one session FILE", 64);
	const { sm, file, header, diagnostics } = loadSession(args._[0]);
	applyLeaf(sm, args.leaf);

	const path = sm.getBranch();
	const context = sm.buildSessionContext();
	const proj = project(path);
	if (!deepEqual(proj.messages, context.messages))
		throw new HarnessError("internal: the projection's messages differ from buildSessionContext()'s", 4);
	const messageEntryIds = proj.entries.flatMap((p) => p.messages.map(() => p.sourceEntry.id ?? null));

	const labels = {};
	for (const e of sm.getEntries()) {
		const l = sm.getLabel(e.id);
		if (l !== undefined) labels[e.id] = l;
	}
	const result = {
		piVersion: PI_VERSION,
		file,
		header,
		leafId: sm.getLeafId(),
		pathIds: path.map((e) => e.id),
		pathTypes: path.map(entryType),
		entryCount: sm.getEntries().length,
		context,
		messageEntryIds,
		labels,
		sessionName: sm.getSessionName() ?? null,
		diagnostics,
	};
	if (args.llm) result.llmMessages = convertToLlm(context.messages);
	if (args.entries) result.pathEntries = path;
	if (args.projection) {
		result.projection = proj.entries.map((p) => ({ id: p.sourceEntry.id, type: entryType(p.sourceEntry), messages: p.messages.length }));
		if (PROJECTED) {
			const edits = {};
			for (const p of proj.entries) if (p.sourceEntry.type === "context_edit") edits[p.sourceEntry.targetId] = p.sourceEntry.id;
			result.contextEdits = edits; // target id -> the edit in force
		}
	}
	if (args.strict && diagnostics.warnings.length) throw new HarnessError(`--strict: ${diagnostics.warnings.join("; ")}`, 3);
	return { result, compact: args.compact };
}
