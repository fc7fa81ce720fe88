package pi

import "slices"

// Behaviour is one rule of Pi's that changed between releases: how it loads a file, builds a
// context, counts, cuts, asks for a summary or writes an entry. Each is in effect from the
// first release that has it (and until the release that undid it, for the one that was
// undone). The first release is the one the CHANGELOG names for the change, or, where the
// CHANGELOG says nothing or names a release whose package does not have it, the first
// published release whose package does (measured with the harness, interop/pi).
// docs/compatibility.md lists them with that evidence.
type Behaviour uint8

const (
	// LineLoader (0.78.1): the file is read line by line and each line parsed as it is, so
	// a header line with a byte-order mark (or another Unicode space) around its JSON is no
	// header, and the file is refused. Before, the whole content was trimmed first.
	LineLoader Behaviour = iota
	// UserImagesWeigh (0.76.0): Pi's estimate counts an image in a user message 4,800
	// characters, as it counts one in a tool result or custom message.
	UserImagesWeigh
	// NoPlanWhenNothingToSummarize (0.79.8): a cut that leaves nothing to summarize is no
	// plan at all ("Nothing to compact"), instead of an empty summary.
	NoPlanWhenNothingToSummarize
	// ZeroUsageSkipped (0.80.0): an assistant usage of all zeros is not taken as the size
	// of the context.
	ZeroUsageSkipped
	// EntryMessages (0.80.4): the context is built from what each entry puts into it
	// (sessionEntryToContextMessages): a user, assistant or tool result message without
	// content gets an empty one, a custom message without content an empty list.
	EntryMessages
	// ContextMessagesWeigh (0.80.4): the cut weighs every message an entry puts into the
	// context (custom messages, branch summaries, a kept older compaction's summary), pulls
	// back only over entries that put nothing there, and a bash, custom or summary message
	// starts a turn (a cut there is no split turn).
	ContextMessagesWeigh
	// ResentSummary (0.80.4 until 0.87.0): an older compaction inside the kept range of the
	// newest one puts its summary into the context again (and weighs in the cut).
	ResentSummary
	// SummaryUsage (0.81.0): compaction and branch summary entries carry the usage of the
	// summary requests.
	SummaryUsage
	// StringToolResultSerialized (0.81.1): a tool result whose content is a string is
	// serialized for the summary (before, the serializer failed on it).
	StringToolResultSerialized
	// BranchFromLeaf (0.84.3): a branch summary's fromId is the leaf that was left (before,
	// the target the user went to).
	BranchFromLeaf
	// TruncatedSummaryRefused (0.84.4): a summary that stopped at its output limit is a
	// failure, never written.
	TruncatedSummaryRefused
	// BranchOutput4096 (0.85.0): a branch summary may write 4,096 tokens (before, 2,048).
	BranchOutput4096
	// SystemMessages (0.86.0): system messages (the prompt and tools, then patches) and usage
	// entries; the kept range of a compaction leaves system messages out, a compaction carries
	// the current one as its systemMessage checkpoint, put into the context before its summary;
	// system messages are never summarized.
	SystemMessages
	// ModelOverrides (0.86.0): compaction.modelOverrides["provider/modelId"] set
	// reserveTokens and keepRecentTokens per model.
	ModelOverrides
	// TrailingToolResultsKeepLastCut (0.86.0): when trailing tool results alone are over
	// keepRecentTokens, the cut stays at the last cut point (the tool call), not the first.
	TrailingToolResultsKeepLastCut
	// SplitTurnKeepsPreviousSummary (0.86.1): a split turn with nothing before it to
	// summarize keeps the previous summary as its history part (before, "No prior history.").
	SplitTurnKeepsPreviousSummary
	// ContextEdits (0.87.0): the context is a projection: context edits applied (the latest per
	// target omits or replaces it), only the newest compaction contributes; the cut runs on
	// it (from after the newest compaction, moving past a recovery's omitted leftovers), and
	// a usage older than the latest context edit or compaction is not the context's size.
	// Retain-none compactions (firstKeptEntryId = their own id).
	ContextEdits
	// SystemMessagesWeigh (0.87.0): Pi's estimate counts a system message (its content,
	// sections and added tools).
	SystemMessagesWeigh
	// NestedCallsFileOps (0.99.0): the file lists of a compaction include the calls a
	// codemode script made (a tool result's nestedCalls).
	NestedCallsFileOps
	// ThinkingOmitted (1.2.0): the conversation sent for a summary leaves thinking out.
	ThinkingOmitted
	// ModelOutputLimit (1.4.0): summaries may write up to the model's own output limit
	// (before, 0.8 × reserveTokens for the history, 0.5 × for a turn prefix, a fixed limit for
	// a branch).
	ModelOutputLimit
	// TurnPrefixInstructions (1.4.0): /compact instructions are given to the turn prefix's
	// summary too.
	TurnPrefixInstructions
	// BranchHonoursEdits (1.5.0): a branch summary leaves out what context edits omitted and
	// sends what they replaced as replaced.
	BranchHonoursEdits
	// SurrogateSafeTruncation (1.5.1): a tool result cut at 2,000 characters for a summary
	// never keeps half of a surrogate pair.
	SurrogateSafeTruncation

	numBehaviours
)

// behaviourInfo is one row of the table: the name docs use, when it holds, and why.
type behaviourInfo struct {
	name        string
	from, until [3]int // until: the first release without it again ({} = still in effect)
	// evidence is the CHANGELOG line (quoted) or the measured difference that shows it.
	evidence string
}

// behaviours is the table of every Behaviour, in the order of the constants.
var behaviours = [numBehaviours]behaviourInfo{
	LineLoader: {"LineLoader", [3]int{0, 78, 1}, [3]int{},
		`CHANGELOG 0.78.1: "Fixed opening and listing very large JSONL session files by reading session entries line-by-line instead of materializing the full file as one string"; measured: x-bom-c01-chat-s loads in 0.78.0, is refused from 0.78.1`},
	UserImagesWeigh: {"UserImagesWeigh", [3]int{0, 76, 0}, [3]int{},
		`CHANGELOG 0.76.0: "Fixed context token estimates to count user image attachments consistently with tool result images"; measured: c08-images-l at keep 1000 keeps another entry from 0.76.0`},
	NoPlanWhenNothingToSummarize: {"NoPlanWhenNothingToSummarize", [3]int{0, 79, 8}, [3]int{},
		`CHANGELOG 0.79.8: "Fixed compaction to refuse sessions with no eligible messages instead of producing empty summaries"`},
	ZeroUsageSkipped: {"ZeroUsageSkipped", [3]int{0, 80, 0}, [3]int{},
		`CHANGELOG 0.80.0: "fixed context usage and compaction estimates to ignore malformed all-zero assistant usage after truncated responses" (first published with it: 0.80.2)`},
	EntryMessages: {"EntryMessages", [3]int{0, 80, 4}, [3]int{},
		`the rewrite behind CHANGELOG 0.80.4 "count context-visible custom messages": buildSessionContext over sessionEntryToContextMessages (first published with it: 0.80.6)`},
	ContextMessagesWeigh: {"ContextMessagesWeigh", [3]int{0, 80, 4}, [3]int{},
		`CHANGELOG 0.80.4: "Fixed compaction retained-token budgeting to count context-visible custom messages"; measured from 0.80.6: turn starts and the pull-back follow the context messages too`},
	ResentSummary: {"ResentSummary", [3]int{0, 80, 4}, [3]int{0, 87, 0},
		`not in the CHANGELOG; measured: from 0.80.6 to 0.86.1 an older compaction kept inside the newest one's range is in the context again (gen c05-compactions); gone in 0.87.0 with the projection (ContextEdits)`},
	SummaryUsage: {"SummaryUsage", [3]int{0, 81, 0}, [3]int{},
		`CHANGELOG 0.81.0: "Added usage accounting for tools, compaction, and branch summaries in persisted sessions" (first published with it: 0.81.1)`},
	StringToolResultSerialized: {"StringToolResultSerialized", [3]int{0, 81, 1}, [3]int{},
		`not in the CHANGELOG; measured: serializeConversation reads tool results with contentText from 0.81.1`},
	BranchFromLeaf: {"BranchFromLeaf", [3]int{0, 84, 3}, [3]int{},
		`CHANGELOG 0.84.3: "Fixed branch summary entries recording the navigation destination in fromId instead of the pre-navigation source leaf"`},
	TruncatedSummaryRefused: {"TruncatedSummaryRefused", [3]int{0, 84, 4}, [3]int{},
		`CHANGELOG 0.84.3: "Fixed truncated compaction and branch summaries being persisted when generation reaches its output token limit"; measured: the check is in 0.84.4's package, not 0.84.3's`},
	BranchOutput4096: {"BranchOutput4096", [3]int{0, 85, 0}, [3]int{},
		`CHANGELOG 0.85.0: "Fixed branch summaries failing when reasoning consumes the previous 2048-token output cap"`},
	SystemMessages: {"SystemMessages", [3]int{0, 86, 0}, [3]int{},
		`CHANGELOG 0.86.0: "Added transcript-backed mid-conversation system prompt and tool changes" (first published with it: 0.86.1)`},
	ModelOverrides: {"ModelOverrides", [3]int{0, 86, 0}, [3]int{},
		`CHANGELOG 0.86.0: "Added per-model reserveTokens and keepRecentTokens settings through compaction.modelOverrides"`},
	TrailingToolResultsKeepLastCut: {"TrailingToolResultsKeepLastCut", [3]int{0, 86, 0}, [3]int{},
		`CHANGELOG 0.86.0: "Fixed mid-run threshold compaction silently skipping oversized trailing tool results"`},
	SplitTurnKeepsPreviousSummary: {"SplitTurnKeepsPreviousSummary", [3]int{0, 86, 1}, [3]int{},
		`not in the CHANGELOG; measured: compact() starts the history part from previousSummary in 0.86.1's package`},
	ContextEdits: {"ContextEdits", [3]int{0, 87, 0}, [3]int{},
		`CHANGELOG 0.87.0: "Added append-only model-context edits", "Added retain-none compaction input", "Fixed edited-context accounting ..."`},
	SystemMessagesWeigh: {"SystemMessagesWeigh", [3]int{0, 87, 0}, [3]int{},
		`not in the CHANGELOG; measured: estimateTokens counts system messages from 0.87.0 (0 in 0.86.1)`},
	NestedCallsFileOps: {"NestedCallsFileOps", [3]int{0, 99, 0}, [3]int{},
		`CHANGELOG 0.99.0: nested tool calls "are recorded as bounded nestedCalls on the calling tool's result"; measured: the file lists read them from 0.99.1`},
	ThinkingOmitted: {"ThinkingOmitted", [3]int{1, 2, 0}, [3]int{},
		`CHANGELOG 1.2.0: "Changed serializeConversation() (compaction, branch summaries, bug reports) to omit thinking blocks"`},
	ModelOutputLimit: {"ModelOutputLimit", [3]int{1, 4, 0}, [3]int{},
		`CHANGELOG 1.4.0: "Summary requests use the model's output limit instead"`},
	TurnPrefixInstructions: {"TurnPrefixInstructions", [3]int{1, 4, 0}, [3]int{},
		`CHANGELOG 1.4.0: "Fixed /compact <instructions> ignoring the instructions when summarizing the start of a turn that compaction splits"`},
	BranchHonoursEdits: {"BranchHonoursEdits", [3]int{1, 5, 0}, [3]int{},
		`CHANGELOG 1.5.0: "Fixed /tree branch summaries including failed assistant replies and original content that context edits had hidden or replaced"`},
	SurrogateSafeTruncation: {"SurrogateSafeTruncation", [3]int{1, 5, 1}, [3]int{},
		`CHANGELOG 1.5.1: "Fixed ... compaction summaries of tool results ... cutting an emoji or other non-BMP character in half when truncating"`},
}

// Behaviours lists every behaviour, in the order of the table.
func Behaviours() []Behaviour {
	out := make([]Behaviour, numBehaviours)
	for i := range out {
		out[i] = Behaviour(i)
	}
	return out
}

// String is the behaviour's name ("UserImagesWeigh").
func (b Behaviour) String() string {
	if b >= numBehaviours {
		return "Behaviour(?)"
	}
	return behaviours[b].name
}

// Since is the first release with b.
func (b Behaviour) Since() Release {
	f := behaviours[b].from
	return Release{major: f[0], minor: f[1], patch: f[2], set: true}
}

// Until is the first release without b again, and false when b still holds.
func (b Behaviour) Until() (Release, bool) {
	u := behaviours[b].until
	return Release{major: u[0], minor: u[1], patch: u[2], set: true}, u != [3]int{}
}

// Evidence is the CHANGELOG line or the measured difference that shows b.
func (b Behaviour) Evidence() string { return behaviours[b].evidence }

// Rules names the behaviours r has, in table order: two releases with the same rules are
// served alike.
func (r Release) Rules() []Behaviour {
	var out []Behaviour
	for _, b := range Behaviours() {
		if r.Has(b) {
			out = append(out, b)
		}
	}
	return out
}

// RuleSets lists one known release for each distinct set of behaviours (the newest known
// release with that set), oldest first: what a test runs to cover every rule set once.
func RuleSets() []Release {
	var out []Release
	rs := Releases()
	for i, r := range rs {
		if i+1 < len(rs) && slices.Equal(r.Rules(), rs[i+1].Rules()) {
			continue
		}
		out = append(out, r)
	}
	return out
}
