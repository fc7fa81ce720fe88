package liveappend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
)

// After the write (appendEntry, step 3): where the line landed, and the restore entries that
// give the leaf back to a writer whose lines landed first.

// maxRestores bounds the restore loop. Each round closes a window of microseconds; a
// writer that lands a line in every one of them is not a coding agent.
const maxRestores = 16

// settle finds where ap's line landed and, if another writer's lines came first, appends
// restore entries until the leaf is the other writer's again (see appendEntry). The scan
// starts at from, the start of the file's last line at the final check; lines that start
// before expect.Size were in the file then (the planned leaf, or a torn tail that a Pi
// line may have been glued onto, which Pi skips).
func settle(ctx context.Context, src *sessionio.File, f *os.File, from int64, expect Expect, s *sessionio.Session, ap *Appended) error {
	lastOther := expect.LeafID
	ours := map[string]bool{ap.ID: true}
	for round := 0; ; round++ {
		if round == 0 {
			hook(src.Name(), "verify")
		}
		region, err := readSettled(ctx, f, from)
		if err != nil {
			return err
		}
		l, found := locate(region, from, expect.Size, ap, ours, lastOther)
		if !found {
			return errors.New("the line just written is not in the file (was the file truncated or replaced?)")
		}
		// Safe: nobody else wrote (our entry is the leaf, as planned), or the newest entry is
		// someone else's, or our newest is a restore hanging off the newest of theirs.
		if l.others == 0 || !ours[l.last.id] || (l.last.id != ap.ID && l.last.parent == l.other) {
			return nil
		}
		if round >= maxRestores {
			return fmt.Errorf("another writer kept appending: leaf not restored after %d restore entries", maxRestores)
		}
		rid := newID(s)
		for ours[rid] {
			rid = newID(s)
		}
		if err := appendRestore(src, f, ap, rid, l.other); err != nil {
			return err
		}
		ours[rid] = true
		ap.Restores = append(ap.Restores, rid)
	}
}

// landing is where ap's line landed among the lines after the planned size.
type landing struct {
	last   regionLine // the last entry line
	other  string     // the newest entry of another writer (lastOther when none)
	others int        // how many entry lines are another writer's
}

// locate finds ap's line in region (read from offset from; lines that start before size
// were in the file at the final check) and sets ap's Offset, Intruders (other writers'
// entries before it) and Followers (after it, not hanging off it); ours are the ids
// compactor wrote (the entry and its restores).
func locate(region []regionLine, from, size int64, ap *Appended, ours map[string]bool, lastOther string) (landing, bool) {
	ap.Intruders, ap.Followers = ap.Intruders[:0], ap.Followers[:0]
	l := landing{other: lastOther}
	found := false
	for _, rl := range region {
		if from+rl.offset < size {
			continue
		}
		switch {
		case rl.line != nil && bytes.Equal(rl.line, ap.Line):
			found = true
			ap.Offset = from + rl.offset
		case rl.id == "", ours[rl.id]:
			// a blank, torn or malformed line (Pi skips it too), or one of our restores
		case !found:
			ap.Intruders = append(ap.Intruders, rl.id)
		default:
			if rl.parent != ap.ID {
				ap.Followers = append(ap.Followers, rl.id)
			}
		}
		if rl.id != "" {
			l.last = rl
			if !ours[rl.id] {
				l.other = rl.id
				l.others++
			}
		}
	}
	return l, found
}

// appendRestore appends the restore entry rid, whose parent is other, the newest entry of
// another writer, to the file ap's entry went to, still under its name.
func appendRestore(src *sessionio.File, f *os.File, ap *Appended, rid, other string) error {
	rts := now().UTC().Truncate(time.Millisecond).Format("2006-01-02T15:04:05.000Z")
	if rts < ap.Timestamp {
		rts = ap.Timestamp
	}
	rline, err := jsjson.Marshal(jsjson.Fields{
		{Key: "type", Value: sessionio.TypeCustom},
		{Key: "customType", Value: RestoreCustomType},
		{Key: "data", Value: jsjson.Fields{{Key: "sideBranch", Value: ap.ID}, {Key: "leaf", Value: other}}},
		{Key: "id", Value: rid},
		{Key: "parentId", Value: other},
		{Key: "timestamp", Value: rts},
	})
	if err != nil {
		return err
	}
	hook(src.Name(), "restore")
	st, err := f.Stat()
	if err != nil {
		return err
	}
	still := func() error {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		return src.AdmitWrite(st)
	}
	if err := appendLine(lineFileOf(src.Name(), f), st.Size(), append(rline, '\n'), still); err != nil {
		return fmt.Errorf("restore entry: %w", err)
	}
	return nil
}

// RestoreCustomType is the customType of the entry compactor appends to give the leaf back
// to a live agent whose lines landed before compactor's (see appendEntry). Pi keeps custom
// entries out of the context.
const RestoreCustomType = "compactor.restore-leaf"

// regionLine is one line of the region after the planned size: its offset in the region,
// its bytes, and for a complete entry line its id and parent.
type regionLine struct {
	offset     int64
	line       []byte
	id, parent string
}

// readSettled reads the file from offset from to its end and splits it into lines. A
// region that does not end with a newline is a write in progress (Pi writes a line and
// its newline at once): it is read again shortly, for a bounded time.
func readSettled(ctx context.Context, f *os.File, from int64) ([]regionLine, error) {
	for wait := 0; ; wait++ {
		st, err := f.Stat()
		if err != nil {
			return nil, err
		}
		buf := make([]byte, st.Size()-from)
		if _, err := f.ReadAt(buf, from); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if len(buf) > 0 && buf[len(buf)-1] != '\n' && wait < 200 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Millisecond):
			}
			continue
		}
		var out []regionLine
		var members []jsonscan.Member
		for off := 0; off < len(buf); {
			end := bytes.IndexByte(buf[off:], '\n')
			if end < 0 {
				end = len(buf) - off
			}
			line := buf[off : off+end]
			rl := regionLine{offset: int64(off), line: line}
			var notObject bool
			members, notObject, err = jsonscan.ScanObject(line, members[:0])
			if err == nil && !notObject {
				rl.id, _ = jsonscan.String(jsonscan.Get(members, "id"))
				rl.parent, _ = jsonscan.String(jsonscan.Get(members, "parentId"))
			}
			out = append(out, rl)
			off += end + 1
		}
		return out, nil
	}
}
