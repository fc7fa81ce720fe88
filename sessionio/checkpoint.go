package sessionio

import (
	"path/filepath"
)

// Checkpoints keep, for each session file read whole, what the read learned about the file's
// history: the file's lines up to the context's first entry (the part a later compaction never
// reaches again) as a table of entries (id, parent, type, timestamp, where the line lies)
// with the whole-file facts of that part (entry count, labels, session name, diagnostics).
// A later read of the same file reads only the lines after the checkpoint, as Pi appends
// them, and takes the rest from the table: `compactor context` and `compactor plan` then cost
// what the live context costs, not what the history does.
//
// This is sound because Pi only appends to a version 3 file: it rewrites a file in place
// only to migrate a v1/v2 file or to replace an invalid header, which changes the header
// (docs/pi-format.md, "How Pi writes its file"). A checkpoint is used only for the same
// file (device and inode), not shorter than the checkpoint, whose header bytes, last 4 KiB
// before the checkpoint and 16 samples spread over the history hash as they did; a table
// that fails its checksum, or a line it points to that no longer parses as the same entry,
// is ignored. What it cannot see is an edit in place of the history that keeps every
// sampled byte: someone editing a session by hand with a tool that writes in place. Such a
// read stays right up to the checkpoint's lines; remove the checkpoint directory (or set
// COMPACTOR_CHECKPOINTS=off) to read every line again.
//
// Lines after the checkpoint that change the history's meaning (a line reusing an id of the
// history, a parent the history was missing) make the read ignore the checkpoint, as do
// v1/v2 files (never checkpointed: migration renumbers them).
type Checkpoints struct {
	// Dir holds one file per session (named by a hash of its absolute path), written
	// atomically (temporary file, rename); created on the first write.
	Dir string
	// MinGain is how many more bytes of history a new checkpoint must cover than the one
	// there (none: 0) to be written; 0 means DefaultMinGain. Below it, reading the lines
	// is cheaper than writing the table again.
	MinGain int64
}

// DefaultMinGain is Checkpoints.MinGain's default: 2 MiB, a few milliseconds of reading.
const DefaultMinGain = 2 << 20

// DefaultCheckpointDir is where compactor keeps checkpoints: $COMPACTOR_CHECKPOINTS, or
// compactor/checkpoints in the user's cache directory ($XDG_CACHE_HOME or ~/.cache). ""
// (no checkpoints) when COMPACTOR_CHECKPOINTS is "off" or there is no cache directory.
func DefaultCheckpointDir(getenv func(string) string) string {
	switch v := getenv("COMPACTOR_CHECKPOINTS"); v {
	case "off", "0", "false", "none":
		return ""
	case "":
	default:
		return v
	}
	dir := getenv("XDG_CACHE_HOME")
	if dir == "" || !filepath.IsAbs(dir) {
		home := getenv("HOME")
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, ".cache")
	}
	return filepath.Join(dir, "compactor", "checkpoints")
}
