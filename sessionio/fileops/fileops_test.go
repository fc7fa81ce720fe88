package fileops

import (
	"encoding/json"
	"github.com/compactor-dev/compactor/sessionio"
	"reflect"
	"testing"
)

func mustMessage(t *testing.T, raw string) *sessionio.Message {
	t.Helper()
	m, err := sessionio.DecodeMessage(json.RawMessage(raw))
	if err != nil {
		t.Fatalf("DecodeMessage(%s): %v", raw, err)
	}
	return m
}

func TestFileOpsAddFromMessage(t *testing.T) {
	t.Parallel()
	f := New()
	f.AddFromMessage(mustMessage(t, `{"role":"assistant","content":[
		{"type":"text","text":"x"},
		{"type":"toolCall","id":"1","name":"read","arguments":{"path":"b.go"}},
		{"type":"toolCall","id":"2","name":"read","arguments":{"path":"a.go","offset":3}},
		{"type":"toolCall","id":"3","name":"write","arguments":{"path":"w.go","content":"..."}},
		{"type":"toolCall","id":"4","name":"edit","arguments":{"path":"a.go"}},
		{"type":"toolCall","id":"5","name":"bash","arguments":{"path":"ignored.go"}},
		{"type":"toolCall","id":"6","name":"read","arguments":{"path":""}},
		{"type":"toolCall","id":"7","name":"read","arguments":{"path":7}},
		{"type":"toolCall","id":"8","name":"read","arguments":["path"]},
		{"type":"toolCall","id":"9","name":"read"},
		{"type":"toolCall","id":"10","name":"read","arguments":{"path":"b.go"}}
	],"stopReason":"toolUse"}`))
	// Not an assistant: ignored even with a matching shape.
	f.AddFromMessage(mustMessage(t, `{"role":"user","content":[{"type":"toolCall","name":"read","arguments":{"path":"u.go"}}]}`))
	f.AddFromMessage(nil)

	if got, want := f.ReadSet(), []string{"b.go", "a.go"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ReadSet = %q, want %q (insertion order)", got, want)
	}
	if got, want := f.WrittenSet(), []string{"w.go"}; !reflect.DeepEqual(got, want) {
		t.Errorf("WrittenSet = %q, want %q", got, want)
	}
	if got, want := f.EditedSet(), []string{"a.go"}; !reflect.DeepEqual(got, want) {
		t.Errorf("EditedSet = %q, want %q", got, want)
	}
	read, modified := f.Lists()
	if want := []string{"b.go"}; !reflect.DeepEqual(read, want) {
		t.Errorf("readFiles = %q, want %q", read, want)
	}
	if want := []string{"a.go", "w.go"}; !reflect.DeepEqual(modified, want) {
		t.Errorf("modifiedFiles = %q, want %q", modified, want)
	}
}

func TestFileOpsSeed(t *testing.T) {
	t.Parallel()
	details := json.RawMessage(`{"readFiles":["r1","r2",3,null],"modifiedFiles":["m1"]}`)
	tests := []struct {
		name       string
		e          *sessionio.Entry
		seedBranch bool
		wantRead   []string
		wantEdited []string
	}{
		{"compaction", &sessionio.Entry{Type: sessionio.TypeCompaction, Details: details}, false, []string{"r1", "r2"}, []string{"m1"}},
		{"compaction from hook", &sessionio.Entry{Type: sessionio.TypeCompaction, Details: details, FromHook: true}, false, nil, nil},
		{"compaction no details", &sessionio.Entry{Type: sessionio.TypeCompaction}, false, nil, nil},
		{"compaction details not object", &sessionio.Entry{Type: sessionio.TypeCompaction, Details: json.RawMessage(`"x"`)}, false, nil, nil},
		{"compaction lists not arrays", &sessionio.Entry{Type: sessionio.TypeCompaction, Details: json.RawMessage(`{"readFiles":"a","modifiedFiles":{"b":1}}`)}, false, nil, nil},
		{"branch summary", &sessionio.Entry{Type: sessionio.TypeBranchSummary, Details: details}, true, []string{"r1", "r2"}, []string{"m1"}},
		{"wrong type for compaction", &sessionio.Entry{Type: sessionio.TypeBranchSummary, Details: details}, false, nil, nil},
		{"wrong type for branch", &sessionio.Entry{Type: sessionio.TypeCompaction, Details: details}, true, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := New()
			if tc.seedBranch {
				f.SeedFromBranchSummary(tc.e)
			} else {
				f.SeedFromCompaction(tc.e)
			}
			if got := f.ReadSet(); !(len(got) == 0 && len(tc.wantRead) == 0) && !reflect.DeepEqual(got, tc.wantRead) {
				t.Errorf("read = %q, want %q", got, tc.wantRead)
			}
			if got := f.EditedSet(); !(len(got) == 0 && len(tc.wantEdited) == 0) && !reflect.DeepEqual(got, tc.wantEdited) {
				t.Errorf("edited = %q, want %q", got, tc.wantEdited)
			}
			if len(f.WrittenSet()) != 0 {
				t.Errorf("written = %q, want none", f.WrittenSet())
			}
		})
	}
}

func TestFileOpsListsUTF16Order(t *testing.T) {
	t.Parallel()
	f := New()
	// U+FF5E sorts after U+1F600 in UTF-16 (0xFF5E > 0xD83D) but before it by code point.
	for _, p := range []string{"\uff5e.txt", "\U0001F600.txt", "Z.txt", "a.txt", "B.txt"} {
		f.AddRead(p)
	}
	f.AddWritten("z")
	f.AddEdited("z") // in both: listed once
	f.AddEdited("a.txt")
	read, modified := f.Lists()
	if want := []string{"B.txt", "Z.txt", "\U0001F600.txt", "\uff5e.txt"}; !reflect.DeepEqual(read, want) {
		t.Errorf("readFiles = %q, want %q", read, want)
	}
	if want := []string{"a.txt", "z"}; !reflect.DeepEqual(modified, want) {
		t.Errorf("modifiedFiles = %q, want %q", modified, want)
	}
}

func TestFileOpsListsEmptyAreNotNil(t *testing.T) {
	t.Parallel()
	read, modified := New().Lists()
	if read == nil || modified == nil {
		t.Fatalf("Lists() = %#v, %#v; want empty non-nil slices (JSON [])", read, modified)
	}
}

func TestFormatLists(t *testing.T) {
	t.Parallel()
	tests := []struct {
		read, modified []string
		want           string
	}{
		{nil, nil, ""},
		{[]string{"a", "b"}, nil, "\n\n<read-files>\na\nb\n</read-files>"},
		{nil, []string{"m"}, "\n\n<modified-files>\nm\n</modified-files>"},
		{[]string{"a"}, []string{"m", "n"}, "\n\n<read-files>\na\n</read-files>\n\n<modified-files>\nm\nn\n</modified-files>"},
	}
	for _, tc := range tests {
		if got := FormatLists(tc.read, tc.modified); got != tc.want {
			t.Errorf("FormatLists(%q, %q) = %q, want %q", tc.read, tc.modified, got, tc.want)
		}
	}
}

func TestFileOpsDirectMapWrites(t *testing.T) {
	t.Parallel()
	f := New()
	f.AddRead("b")
	f.Read["a"] = struct{}{} // written directly: still listed, after the ordered ones
	if got, want := f.ReadSet(), []string{"b", "a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ReadSet = %q, want %q", got, want)
	}
}

func TestFileOpsKeepsLoneSurrogates(t *testing.T) {
	t.Parallel()
	f := New()
	f.AddFromMessage(mustMessage(t, `{"role":"assistant","content":[{"type":"toolCall","id":"1","name":"edit","arguments":{"path":"a\ud800b.go"}}]}`))
	got := f.EditedSet()
	if len(got) != 1 || got[0] != "a\xed\xa0\x80b.go" {
		t.Fatalf("EditedSet = %q, want the lone surrogate kept as WTF-8 (\"a\\xed\\xa0\\x80b.go\")", got)
	}
}
