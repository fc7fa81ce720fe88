package console

import (
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
)

// What the session page reads of a session's file: its current path, the context's size
// at each entry of it (Pi's estimate, as a compaction's tokensBefore is), and its
// compactions with their cuts (and their summaries, for the operator).

// SessionFile is what the page shows of a file.
type SessionFile struct {
	Path        string           `json:"path"`
	Size        int64            `json:"size"`
	Entries     int              `json:"entries"`
	LeafID      string           `json:"leafId"`
	Compactions []CompactionView `json:"compactions"`
	PathPoints  []PathPoint      `json:"pathPoints"`
}

// PathPoint is an entry of the current path and the context's size with it as the leaf.
type PathPoint struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Tokens     int    `json:"tokens"`     // the entry's own
	Cumulative int    `json:"cumulative"` // the context's, with this entry as the leaf
	Compaction bool   `json:"compaction,omitempty"`
	Cut        bool   `json:"cut,omitempty"` // the first entry a compaction kept
}

// CompactionView is one compaction entry of the path.
type CompactionView struct {
	ID               string `json:"id"`
	Timestamp        string `json:"timestamp"`
	FirstKeptEntryID string `json:"firstKeptEntryId"`
	TokensBefore     int    `json:"tokensBefore"`
	FromHook         bool   `json:"fromHook"`
	SummaryChars     int    `json:"summaryChars"`
	// Summary is the text: the operator's only (the viewer gets SummaryChars).
	Summary string `json:"summary,omitempty"`
}

// maxSessionFile bounds what the page reads of a file.
const maxSessionFile = 256 << 20

// fileCache keeps the last files read, by path, size and mtime: the live page asks every
// second, and the file changes far less often.
var fileCache = struct {
	sync.Mutex
	m map[string]cachedFile
}{m: map[string]cachedFile{}}

type cachedFile struct {
	size  int64
	mtime time.Time
	f     *SessionFile
	used  time.Time
}

const fileCacheSize = 16

// readSessionFile reads rel inside dir (never outside it: the store's root is opened as
// an os.Root, which refuses .. and symbolic links that leave it).
func readSessionFile(dir, rel string, withSummary bool) (*SessionFile, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("store directory: %w", err)
	}
	defer root.Close()
	fh, err := root.Open(filepath.FromSlash(rel))
	if err != nil {
		return nil, fmt.Errorf("session file %s: %w", rel, err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("session file %s: %w", rel, err)
	}
	if fi.Size() > maxSessionFile {
		return nil, fmt.Errorf("session file %s: %d bytes, more than the console reads (%d)", rel, fi.Size(), maxSessionFile)
	}
	key := filepath.Join(dir, rel)
	fileCache.Lock()
	if c, ok := fileCache.m[key]; ok && c.size == fi.Size() && c.mtime.Equal(fi.ModTime()) {
		c.used = time.Now()
		fileCache.m[key] = c
		fileCache.Unlock()
		return c.f.view(withSummary), nil
	}
	fileCache.Unlock()
	data, err := io.ReadAll(io.LimitReader(fh, maxSessionFile))
	if err != nil {
		return nil, fmt.Errorf("session file %s: %w", rel, err)
	}
	s, err := sessionio.Parse(data, rel)
	if err != nil {
		return nil, fmt.Errorf("session file %s: %w", rel, err)
	}
	f, err := sessionView(s, rel)
	if err != nil {
		return nil, err
	}
	fileCache.Lock()
	if len(fileCache.m) >= fileCacheSize {
		var oldest string
		for k, c := range fileCache.m {
			if oldest == "" || c.used.Before(fileCache.m[oldest].used) {
				oldest = k
			}
		}
		delete(fileCache.m, oldest)
	}
	fileCache.m[key] = cachedFile{size: fi.Size(), mtime: fi.ModTime(), f: f, used: time.Now()}
	fileCache.Unlock()
	return f.view(withSummary), nil
}

// view is a copy with or without the summaries' text.
func (f *SessionFile) view(withSummary bool) *SessionFile {
	out := *f
	out.Compactions = make([]CompactionView, len(f.Compactions))
	for i, c := range f.Compactions {
		if !withSummary {
			c.Summary = ""
		}
		out.Compactions[i] = c
	}
	return &out
}

func sessionView(s *sessionio.Session, rel string) (*SessionFile, error) {
	path, err := s.Path("")
	if err != nil {
		return nil, fmt.Errorf("session file %s: %w", rel, err)
	}
	count := tokenize.Estimate()
	f := &SessionFile{Path: rel, Size: s.Size, Entries: len(s.Entries), LeafID: s.LeafID(), Compactions: []CompactionView{}}
	index := map[string]int{}
	prefix := make([]int, len(path)+1) // prefix[i]: tokens of path[:i]
	for i, e := range path {
		index[e.ID] = i
		t := 0
		if e.Type != sessionio.TypeCompaction {
			if m := picontext.AsMessage(e); m != nil {
				t = count.Count(m)
			}
		}
		prefix[i+1] = prefix[i] + t
		f.PathPoints = append(f.PathPoints, PathPoint{ID: e.ID, Type: e.Type, Tokens: t})
	}
	// The context at entry i: from the latest compaction before it, that compaction's
	// summary and the entries from its first kept one; before any, the whole path.
	base := 0
	for i, e := range path {
		if e.Type == sessionio.TypeCompaction {
			st := i
			if k, ok := index[e.FirstKeptEntryID]; ok && k < i {
				st = k
				f.PathPoints[k].Cut = true
			}
			summary := 0
			if m := picontext.AsMessage(e); m != nil {
				summary = count.Count(m)
			}
			f.PathPoints[i].Tokens = summary
			f.PathPoints[i].Compaction = true
			// Entries between the cut and the compaction stay in the context, after the summary.
			base = summary - prefix[st]
			f.Compactions = append(f.Compactions, CompactionView{ID: e.ID, Timestamp: e.Timestamp, FirstKeptEntryID: e.FirstKeptEntryID,
				TokensBefore: int(e.TokensBefore), FromHook: e.FromHook, SummaryChars: len([]rune(e.Summary)), Summary: e.Summary})
			f.PathPoints[i].Cumulative = base + prefix[i]
			continue
		}
		f.PathPoints[i].Cumulative = base + prefix[i+1]
	}
	return f, nil
}
