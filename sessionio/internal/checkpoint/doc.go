// Package checkpoint is the file in which sessionio keeps what a whole read of a session
// learned about its history (sessionio.Checkpoints says what it holds and why that is
// sound): its binary format (Encode, Decode: records of the history's entries, an id
// table, the whole-file facts), the checks that tie it to one state of the session file
// (its identity, hashes of the header, of the bytes before its end and of samples between:
// Verify) and where it is stored (DirStore).
//
// It is separate from sessionio because it knows only bytes, records and hashes: the tail
// read decides when to use a checkpoint and what to put into the next one
// (sessionio/checkpointread.go, checkpointwrite.go). It is internal: nothing outside
// sessionio reads or writes a checkpoint but through sessionio.
package checkpoint
