package summarize

import (
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/fileops"
)

// FileOps is Pi's file-operation tracking (read, written, edited path sets in insertion
// order). It lives in sessionio/fileops so that cutpoint and summarize share one implementation.
type FileOps = fileops.FileOps

// ExtractFileOps is Pi's compaction file tracking as Pi r does it: seeded from the previous
// compaction's details (unless it came from an extension, fromHook), then every assistant
// tool call read/write/edit in each message list (the summarized messages, then the turn
// prefix of a split turn), and from 0.99 (NestedCallsFileOps) the calls a tool result's
// codemode script made (nestedCalls). prevCompaction may be nil. It is what cutpoint's plans
// hold in FileOps.
func ExtractFileOps(r pi.Release, prevCompaction *sessionio.Entry, lists ...[]*sessionio.Message) *FileOps {
	f := fileops.New()
	f.SeedFromCompaction(prevCompaction)
	for _, msgs := range lists {
		for _, m := range msgs {
			f.AddFromMessage(m)
			if r.Has(pi.NestedCallsFileOps) {
				f.AddFromNestedCalls(m)
			}
		}
	}
	return f
}

// ComputeFileLists is Pi's computeFileLists: modifiedFiles = sorted(edited ∪ written),
// readFiles = sorted(read − modified), in UTF-16 order. A nil f gives two empty lists.
func ComputeFileLists(f *FileOps) (readFiles, modifiedFiles []string) {
	if f == nil {
		return []string{}, []string{}
	}
	return f.Lists()
}

// FormatFileOperations is Pi's formatFileOperations: the <read-files>/<modified-files>
// block appended to a summary ("" when both lists are empty).
func FormatFileOperations(readFiles, modifiedFiles []string) string {
	return fileops.FormatLists(readFiles, modifiedFiles)
}
