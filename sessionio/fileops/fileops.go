package fileops

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
)

// FileOps is Pi's file-operation tracking (docs/pi-format.md, "File lists"): the paths the
// summarized part of a session read, wrote and edited. Both compaction (cutpoint) and
// branch summaries (summarize) need it, so it is a package of its own beside sessionio.
//
// The maps are the sets; the order slices remember insertion order, because Pi's sets are
// JavaScript Sets (iteration = insertion order) and `interop/pi/pi cut` prints them that way.
// Use Add* and the Seed/AddFromMessage methods rather than writing the maps directly, or
// ReadSet/WrittenSet/EditedSet will list the extra paths after the ordered ones.
type FileOps struct {
	Read, Written, Edited map[string]struct{}

	readOrder, writtenOrder, editedOrder []string
}

// New returns empty file operations.
func New() *FileOps {
	return &FileOps{
		Read:    map[string]struct{}{},
		Written: map[string]struct{}{},
		Edited:  map[string]struct{}{},
	}
}

func addTo(set map[string]struct{}, order *[]string, path string) {
	if _, ok := set[path]; ok {
		return
	}
	set[path] = struct{}{}
	*order = append(*order, path)
}

// AddRead records a read path.
func (f *FileOps) AddRead(path string) { addTo(f.Read, &f.readOrder, path) }

// AddWritten records a written path.
func (f *FileOps) AddWritten(path string) { addTo(f.Written, &f.writtenOrder, path) }

// AddEdited records an edited path.
func (f *FileOps) AddEdited(path string) { addTo(f.Edited, &f.editedOrder, path) }

// AddFromMessage is Pi's extractFileOpsFromMessage: for an assistant message, every
// toolCall named read, write or edit whose arguments.path is a non-empty string adds that
// path to Read, Written or Edited. Other roles and tools (bash included) are ignored.
func (f *FileOps) AddFromMessage(m *sessionio.Message) {
	if m == nil || m.Role != sessionio.RoleAssistant || m.Content.IsString {
		return
	}
	for _, b := range m.Content.Blocks {
		if b.Type != sessionio.BlockToolCall {
			continue
		}
		f.addCall(b.Name, b.Arguments)
	}
}

// AddFromNestedCalls is Pi 1.x's addition to extractFileOpsFromMessage for a tool result: the
// calls a codemode script made (nestedCalls.calls, each with a name and arguments) add their
// paths as tool calls do. Pi 1.x's compaction reads them; its branch summaries never see a
// tool result.
func (f *FileOps) AddFromNestedCalls(m *sessionio.Message) {
	if m == nil || m.Role != sessionio.RoleToolResult || len(m.NestedCalls) == 0 || m.NestedCalls[0] != '{' {
		return
	}
	var buf [4]jsonscan.Member
	ms, notObject, err := jsonscan.ScanObject(m.NestedCalls, buf[:0])
	if err != nil || notObject {
		return
	}
	calls := lastMember(ms, "calls")
	if len(calls) == 0 || calls[0] != '[' {
		return
	}
	var cbuf [8]jsonscan.Member
	for _, call := range jsonscan.TrustedElems(calls, nil) {
		if len(call) == 0 || call[0] != '{' {
			continue
		}
		cms := jsonscan.TrustedMembers(call, cbuf[:0])
		if name, ok := jsonscan.String(lastMember(cms, "name")); ok {
			f.addCall(name, lastMember(cms, "arguments"))
		}
	}
}

// addCall records the path of a call of the read, write or edit tool whose arguments.path
// is a non-empty string (Pi's addFileOp); other tools are ignored.
func (f *FileOps) addCall(tool string, args json.RawMessage) {
	var add func(string)
	switch tool {
	case "read":
		add = f.AddRead
	case "write":
		add = f.AddWritten
	case "edit":
		add = f.AddEdited
	default:
		return
	}
	if p, ok := pathArgument(args); ok && p != "" {
		add(p)
	}
}

// pathArgument returns arguments.path when arguments is an object whose "path" is a string.
func pathArgument(args json.RawMessage) (string, bool) {
	if len(args) == 0 || args[0] != '{' {
		return "", false
	}
	var buf [8]jsonscan.Member
	ms, notObject, err := jsonscan.ScanObject(args, buf[:0])
	if err != nil || notObject {
		return "", false
	}
	raw := lastMember(ms, "path")
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	return unquoteJS(raw)
}

// lastMember returns the value of the last member whose (decoded) key is key, nil if none:
// JSON.parse keeps the last of duplicate keys.
func lastMember(ms []jsonscan.Member, key string) []byte {
	for i := len(ms) - 1; i >= 0; i-- {
		if jsonscan.Key(ms[i].Key) == key {
			return ms[i].Val
		}
	}
	return nil
}

// SeedFromCompaction carries a previous compaction's file lists forward, as Pi's
// prepareCompaction does: only for a compaction compactor or Pi wrote itself (fromHook
// false) with details; details.readFiles go to Read, details.modifiedFiles to Edited.
// Anything that is not an array of strings is ignored (an extension may store any JSON).
func (f *FileOps) SeedFromCompaction(e *sessionio.Entry) {
	if e == nil || e.Type != sessionio.TypeCompaction {
		return
	}
	f.seedFromDetails(e)
}

// SeedFromBranchSummary is the same for a branch_summary entry (Pi's prepareBranchEntries
// first pass).
func (f *FileOps) SeedFromBranchSummary(e *sessionio.Entry) {
	if e == nil || e.Type != sessionio.TypeBranchSummary {
		return
	}
	f.seedFromDetails(e)
}

// SeedFromHookCompaction seeds from a compaction an extension made (fromHook true), which
// Pi itself does not carry forward. compactor's prepared summaries reach Pi through its
// extension hook, so their file lists would otherwise be lost at the next compaction;
// a preparation seeds from them when their details have Pi's shape.
func (f *FileOps) SeedFromHookCompaction(e *sessionio.Entry) {
	if e == nil || e.Type != sessionio.TypeCompaction || !e.FromHook {
		return
	}
	f.seedDetails(e)
}

func (f *FileOps) seedFromDetails(e *sessionio.Entry) {
	if e.FromHook {
		return
	}
	f.seedDetails(e)
}

func (f *FileOps) seedDetails(e *sessionio.Entry) {
	if len(e.Details) == 0 || e.Details[0] != '{' {
		return
	}
	ms, notObject, err := jsonscan.ScanObject(e.Details, nil)
	if err != nil || notObject {
		return
	}
	for _, p := range stringArray(lastMember(ms, "readFiles")) {
		f.AddRead(p)
	}
	for _, p := range stringArray(lastMember(ms, "modifiedFiles")) {
		f.AddEdited(p)
	}
}

// stringArray returns the string elements of a JSON array (validated by the caller),
// skipping other elements.
func stringArray(raw json.RawMessage) []string {
	if len(raw) == 0 || raw[0] != '[' {
		return nil
	}
	elems := jsonscan.TrustedElems(raw, nil)
	out := make([]string, 0, len(elems))
	for _, el := range elems {
		if len(el) == 0 || el[0] != '"' {
			continue
		}
		if s, ok := unquoteJS(el); ok {
			out = append(out, s)
		}
	}
	return out
}

// Lists is Pi's computeFileLists: modifiedFiles = sorted unique Edited ∪ Written, readFiles
// = sorted Read minus modifiedFiles, both in JavaScript's default sort order (UTF-16 code
// units). These are the lists stored in a compaction's details.
func (f *FileOps) Lists() (readFiles, modifiedFiles []string) {
	modified := map[string]struct{}{}
	modifiedFiles = []string{}
	for _, p := range append(f.EditedSet(), f.WrittenSet()...) {
		if _, ok := modified[p]; !ok {
			modified[p] = struct{}{}
			modifiedFiles = append(modifiedFiles, p)
		}
	}
	readFiles = []string{}
	for _, p := range f.ReadSet() {
		if _, ok := modified[p]; !ok {
			readFiles = append(readFiles, p)
		}
	}
	sortUTF16(modifiedFiles)
	sortUTF16(readFiles)
	return readFiles, modifiedFiles
}

// ReadSet returns the read paths in insertion order (Pi's Set iteration order).
func (f *FileOps) ReadSet() []string { return ordered(f.Read, f.readOrder) }

// WrittenSet returns the written paths in insertion order.
func (f *FileOps) WrittenSet() []string { return ordered(f.Written, f.writtenOrder) }

// EditedSet returns the edited paths in insertion order.
func (f *FileOps) EditedSet() []string { return ordered(f.Edited, f.editedOrder) }

func ordered(set map[string]struct{}, order []string) []string {
	out := make([]string, 0, len(set))
	seen := make(map[string]struct{}, len(order))
	for _, p := range order {
		if _, ok := set[p]; ok {
			if _, dup := seen[p]; !dup {
				seen[p] = struct{}{}
				out = append(out, p)
			}
		}
	}
	if len(out) < len(set) { // paths put into the map directly: sorted, after the rest
		var extra []string
		for p := range set {
			if _, ok := seen[p]; !ok {
				extra = append(extra, p)
			}
		}
		sortUTF16(extra)
		out = append(out, extra...)
	}
	return out
}

// FormatLists is Pi's formatFileOperations: "" when both lists are empty, otherwise
// "\n\n" followed by a <read-files> and/or <modified-files> section (non-empty ones only,
// one path per line), sections separated by a blank line. It is appended to a summary.
func FormatLists(read, modified []string) string {
	var sections []string
	if len(read) > 0 {
		sections = append(sections, "<read-files>\n"+strings.Join(read, "\n")+"\n</read-files>")
	}
	if len(modified) > 0 {
		sections = append(sections, "<modified-files>\n"+strings.Join(modified, "\n")+"\n</modified-files>")
	}
	if len(sections) == 0 {
		return ""
	}
	return "\n\n" + strings.Join(sections, "\n\n")
}

func sortUTF16(s []string) {
	sort.SliceStable(s, func(i, j int) bool { return jsjson.CompareUTF16(s[i], s[j]) < 0 })
}

// unquoteJS decodes a JSON string literal as JSON.parse does, keeping lone surrogates (as
// WTF-8), so a path with one survives into the details compactor writes.
func unquoteJS(raw json.RawMessage) (string, bool) {
	s, err := jsjson.Unquote(raw)
	if err != nil {
		return "", false
	}
	return s, true
}
