package engine

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/tokenize"
)

// A request that names a session is worked only on a file whose header is that session:
// every kind refuses another as bad input before a model is asked or a byte written (a
// file put in the place of the one the pipeline admitted is not worked under the admitted
// id). The same requests naming the file's own session go on.
func TestRequestNamesTheFilesSession(t *testing.T) {
	t.Parallel()
	const sid = "019a0000-0000-7000-8000-00000005e551"
	eng, err := New(failingSummarizer{}, Settings{Policy: cutpoint.PolicyNearest, Counter: tokenize.CounterEstimate, KeepRecentTokens: 3000})
	if err != nil {
		t.Fatal(err)
	}
	file := headerOnly(t, sid)
	growSession(t, file, "", 0, 14)
	before, _ := os.ReadFile(file)
	pi, err := Plan(file, Settings{Policy: cutpoint.PolicyPi, Counter: tokenize.CounterEstimate, KeepRecentTokens: 3000, ReserveTokens: 16384}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cut := pi.Plan.FirstKeptEntryID
	ctx := context.Background()
	kinds := map[string]func(id string) error{
		"compact": func(id string) error {
			_, err := eng.Compact(ctx, Request{File: file, SessionID: id, DryRun: true})
			return err
		},
		"branch summary": func(id string) error {
			_, err := eng.BranchSummary(ctx, Request{File: file, SessionID: id, DryRun: true})
			return err
		},
		"prepare": func(id string) error {
			_, _, err := eng.Prepare(ctx, Request{File: file, SessionID: id, DryRun: true}, nil)
			return err
		},
		"extract": func(id string) error {
			_, err := eng.Extract(ctx, ExtractRequest{File: file, SessionID: id, FirstKeptEntryID: cut, KeepRecentTokens: 3000})
			return err
		},
		"base": func(id string) error {
			_, _, err := eng.MakeBase(ctx, BaseRequest{File: file, SessionID: id, Anchor: BaseAnchor{FirstKeptEntryID: cut}}, nil)
			return err
		},
	}
	for name, run := range kinds {
		err := run(sid + "-other")
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "holds session "+sid+", the request names session "+sid+"-other") {
			t.Errorf("%s under another session id: %v, want bad input naming both", name, err)
		}
		// The file's own id passes the check: what follows is the kind's own business (the
		// stand-in model refuses to be called), never this refusal.
		if err := run(sid); err != nil && strings.Contains(err.Error(), "the request names session") {
			t.Errorf("%s under the file's own id: %v", name, err)
		}
	}
	if after, _ := os.ReadFile(file); string(after) != string(before) {
		t.Error("the file was written")
	}
}
