// Package confine opens a path beneath a directory (a store's root) without leaving it and
// without following a symlink: openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS where the
// kernel has it, os.Root elsewhere, non-blocking so that a FIFO put in a session's place
// cannot hang the open.
//
// It is apart from sessionio because it is the one kernel- and platform-specific part of
// opening a session file (a probe, build tags, raw system calls); sessionio.File puts it
// together with the checks a job's file needs (one hard link, the device and inode of the
// first open) and re-exports its modes (ConfineMode, Confinement, SetConfinement).
package confine
