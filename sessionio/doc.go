// Package sessionio reads Pi session files (append-only JSONL trees: docs/pi-format.md)
// exactly as Pi reads them; it never writes one (package sessionio/liveappend appends to
// them).
//
// # Two readers, one way to read a line
//
// The full read (ReadFile, Parse: read.go, with migrate.go for v1/v2 files) takes every line
// in file order and indexes the whole tree. It is simple, and it is the oracle: whatever the
// other reader returns must equal what the full read gives for the same bytes.
//
// The tail read (ReadTail, ReadTailWith: tail.go) serves the commands that run on long-lived
// sessions, whose context is a small last part of a large file. It reads the file backwards
// from the leaf (the last line) and stops as soon as its Need is met: the context's messages,
// the model, the thinking level, a usage Pi's budget formula takes, the root, or the whole
// file. For everything the Need settles its Tail equals the full read's Path and
// picontext.Build; TestTailMatchesFullRead, TestCheckpointMatchesFullRead and
// FuzzTailMatchesFullRead check that on the corpus and on generated trees, with every Need
// and with read sizes that split lines anywhere.
//
// Both readers turn a line into an entry the same way: one scanner validates a line and
// locates its members in one pass (package jsonscan), one decoder builds the entry, its
// message and usage from them (decode.go, message.go), and one line parser does both and
// says what a line that is no entry is, with the words of every diagnostic (line.go).
//
// # The tail read in layers
//
// A source of lines read backwards from the end of the file (backward.go) feeds a walk from
// the leaf (walk.go) that follows parentIds, as Pi's getBranch does, and notes what each
// entry settles; the lines are read only as far back as the walk asks. The walk does not
// know where entries come from: it asks the parts of the file's history, newest first, for
// an entry's parent. Without a checkpoint the lines are the only part. With one (Checkpoints
// in checkpoint.go; the file itself in package internal/checkpoint), the checkpoint's table
// replaces the lines before its end (checkpointread.go): the walk takes the history's entries
// from the table and reads a history line only where it still needs the line's content. A
// read of the whole file gathers the whole-file facts as it goes (facts.go) and then writes
// the next checkpoint (checkpointwrite.go). tailread.go puts one read together; tail.go is
// what a caller sees, and the two fallbacks: the full read for a file the tail read does not
// read (v1/v2, an odd first line, a parentId cycle on the path), and a read without the
// checkpoint when the file's new lines contradict it.
//
// Which file calls which, callers above:
//
//	tail.go         Need, TailOptions, Tail; ReadTail, ReadTailWith, Extend; the fallbacks
//	   │
//	tailread.go     one read: header, leaf, walk, the lines the Need asks for beyond it, Tail
//	   ├──► walk.go ─── parent(e) ──┬──► backward.go           the lines, from the end, by id
//	   │                            └──► checkpointread.go     a checkpoint's table of the history
//	   ├──► facts.go            entry count, labels, name, diagnostics (NeedFile)
//	   └──► checkpointwrite.go  the next checkpoint
//
//	checkpointread.go, checkpointwrite.go ──► internal/checkpoint   the checkpoint file: format, checks, directory
//	backward.go, checkpointread.go ──► line.go ◄── read.go    (the full read; migrate.go: v1/v2)
//	                                      │
//	                                      ▼
//	                          decode.go, message.go ──► jsonscan
//
// One checkpointed read of `compactor context` (NeedContext|NeedRoot|NeedFile, messages left
// on disk) passes through them in this order: tail.go (ReadTailWith, readTail) and
// internal/checkpoint (Decode, Verify); tailread.go (run); backward.go (readHeader) and
// checkpointread.go (fits); backward.go, line.go, decode.go, jsonscan for each line from the
// end; walk.go asking backward.go, then checkpointread.go, for parents; tailread.go (finish)
// with facts.go and read.go (findCycle); checkpointwrite.go and internal/checkpoint (Encode,
// DirStore.Save) when a new checkpoint covers more history.
//
// # The rest
//
// session.go and entry.go are the types a read returns, file.go is the one file a job reads
// and appends to (pinned by device and inode, confined beneath a store's root: package
// internal/confine opens it there). Which Pi release's rules apply is package pi's
// (dialect.go asks it whether that Pi loads a file).
//
// Beside it: sessionio/picontext builds the context Pi sends its model from a path read
// here, sessionio/activity tells from it whether Pi is mid-turn, sessionio/liveappend
// appends a compaction or branch summary as one fsynced line next to a live Pi,
// sessionio/jsonscan validates a line and locates its members, sessionio/jsjson writes JSON
// byte for byte as JavaScript does, and sessionio/fileops tracks the files a summary lists.
package sessionio
