// Package liveappend appends one entry (a compaction or a branch summary) to a Pi session
// file that a live Pi may be writing at the same instant, without a lock.
//
// It is apart from package sessionio, which reads session files, because writing next to a
// live agent has rules of its own that no read has, and every byte compactor puts into a
// session file goes through here:
//
//   - the entry is one line, written by a single write(2) on an O_APPEND descriptor and
//     fsynced, with its blocks reserved first, so that a full disk fails before any byte is
//     written (appendLine in appendline.go; a write that stops short is taken back or
//     reported with where its bytes are);
//   - a file is never rewritten or truncated in place: Pi only appends, and so does this
//     package (the one truncation takes back compactor's own torn bytes, and only when the
//     size shows nothing came after them);
//   - the file is the one the job read: a sessionio.File pins its device and inode at the
//     first open, and one fstat of the descriptor right before the write checks that it is
//     still that file, under a name, of the size the job planned against (append.go);
//   - a Pi line that lands between that check and the write is found afterwards, and a
//     restore entry gives the leaf back to Pi (appendsettle.go), so that nothing Pi wrote
//     leaves the path it loads.
//
// docs/live-agents.md describes these rules and the tests that hold them.
package liveappend
