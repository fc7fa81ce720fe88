package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/wire"
)

// sampleIDs are session ids whose subjects the extension must name as Go does: Pi's UUIDs,
// and ids that cannot be a subject token (hashed), or look like a hashed one.
var sampleIDs = []string{
	"019a5d6f-cf40-70d8-8e58-66b28cf3290e",
	"with.dot",
	"with space",
	"wild*card>",
	"h-not-a-hash",
	"ünïcödé",
	strings.Repeat("x", 129),
}

const sampleStore = "host-A_1"

var sampleAt = time.Date(2026, 12, 7, 3, 4, 5, 600_000_000, time.UTC)

// samplePrepared is a prepared value with every field set, as a worker stores it.
func samplePrepared() engine.Prepared {
	prev, based := "c0mp4ct1", "1eaf0001"
	return engine.Prepared{
		V: 1, Store: sampleStore, Path: "--home-dev--/2026-12-07_019a5d6f.jsonl", SessionID: sampleIDs[0],
		LeafID: "1eaf0002", FirstKeptEntryID: "f1r57k3p", PreviousCompactionID: &prev, BoundaryStartEntryID: "b0und4ry",
		SummarizedEntryIDs: []string{"b0und4ry", "5umm4r1z"}, TokensBefore: 12000, Summary: "## Goal\nA summary.",
		Details:            engine.PreparedDetails{ReadFiles: []string{"a.txt"}, ModifiedFiles: []string{"b.txt"}},
		KeptTokensEstimate: 1500, SummaryTokensEstimate: 300, Policy: "pi", Counter: "estimate", PiVersion: "1.6.0",
		Settings:           engine.PreparedSettings{KeepRecentTokens: 1500, ReserveTokens: 4000, ContextWindow: 20000},
		CustomInstructions: "", RequestedAt: sampleAt.Add(-5 * time.Second), CreatedAt: sampleAt,
		LLMInputTokens: 9000, LLMCachedInputTokens: 4000, LLMOutputTokens: 300, LLMCalls: 1,
		Incremental: true, BasedOnLeafID: &based, History: "A history.", HistoryEndEntryID: "f1r57k3p",
		Bridge:     &engine.BridgeInfo{FromEntryID: "f1r57k3p", Messages: 3, TokensEstimate: 400, Items: 2, Sections: 1, DurationMS: 1.5},
		BuiltOn:    &engine.BuiltOn{Source: "model", SHA256: "ab12", FromEntryID: "b0und4ry", ReadAgainTokens: 20, BaseMadeAt: sampleAt.Add(-time.Minute), Via: "c0mp4ct1", Refused: "entries-differ", Segments: 2},
		SpanTokens: &engine.SpanTokens{Model: 9000, Extract: 400},
	}
}

// sampleMessages are a Go-encoded message of every kind, every field set.
func sampleMessages() (map[string]any, error) {
	job := wire.Job{
		V: wire.SpanJobVersion, Kind: wire.KindBase, Store: sampleStore, Path: "--home-dev--/2026-12-07_019a5d6f.jsonl", SessionID: sampleIDs[0],
		Reason: "extension", RequestedAt: sampleAt, ExpectLeafID: "1eaf0002", TargetID: "t4rg3t", FromID: "fr0m", Force: true, OnlyOverBudget: true,
		Policy: "pi", Counter: "estimate", KeepRecentTokens: 1500, Instructions: "focus", PiVersion: "1.6.0", Cut: "f1r57k3p", SummarySHA256: "ab12",
		Slot: 2, Merge: "5ta7e",
	}
	job.ID = job.MsgID()
	// Every field set: a slot and a merge are never asked together, so the sample is valid
	// but for that.
	valid := job
	valid.Merge = ""
	if err := valid.Validate(); err != nil {
		return nil, fmt.Errorf("sample job: %w", err)
	}
	prepared, err := json.Marshal(samplePrepared())
	if err != nil {
		return nil, err
	}
	event := wire.Event{
		V: wire.EventVersion, JobID: job.ID, JobSeq: 42,
		JobRef: wire.JobRef{Store: sampleStore, SessionID: sampleIDs[0], Path: job.Path, Kind: wire.KindPrepare},
		Tally: wire.Tally{Outcome: outcome.Done, Reason: "prepared", EntryID: "3ntry", TokensBefore: 12000, TokensAfter: 1800, LLMTokens: 9300,
			LLMInputTokens: 9000, LLMCachedInputTokens: 4000, LLMOutputTokens: 300},
		LLMModel: "m", DurationMs: 5000, Attempt: 1, RetryInMs: 1000, Error: "e", Busy: true, PiUnknown: "9.9.9", Worker: "w1", At: sampleAt,
	}
	return map[string]any{
		"Job":   job,
		"Event": event,
		"BridgeRequest": wire.BridgeRequest{V: wire.BridgeVersion, Store: sampleStore, Path: job.Path, SessionID: sampleIDs[0], LeafID: "1eaf0003",
			FirstKeptEntryID: "f1r57k3p", PiVersion: "1.6.0", Extract: true, KeepRecentTokens: 1500, ReserveTokens: 4000, ContextWindow: 20000},
		"BridgeReply": wire.BridgeReply{V: wire.BridgeVersion, Prepared: prepared, Error: "e", Stale: true},
		"HookReport": wire.HookReport{V: wire.HookVersion, Store: sampleStore, SessionID: sampleIDs[0], Outcome: wire.HookHit, Reason: "r", LatencyMs: 8.5,
			LeafID: "1eaf0003", Bridged: true, BridgedEntries: 3, Result: wire.HookResultPrepared, ReasonCode: "none", PiReason: "threshold",
			Counts: map[string]int{"prepared/none": 1}, SpanTokens: &wire.SpanTokens{Model: 9000, Extract: 400}, Base: "model", BaseRefused: "none"},
		"Prepared": samplePrepared(),
	}, nil
}

// sampleSubjects are, for each sample id, its token and Go's subjects and keys.
func sampleSubjects() []map[string]string {
	var out []map[string]string
	for _, id := range sampleIDs {
		row := map[string]string{"store": sampleStore, "sessionId": id, "token": wire.SessionToken(id), "kind": wire.KindPrepare, "seq": "42"}
		for _, b := range builders {
			arg := ""
			if len(b.Params) > 2 {
				arg = row[b.Params[2]]
			}
			row[b.Name] = b.Go(sampleStore, id, arg)
		}
		out = append(out, row)
	}
	return out
}

// GenerateSamples is extensions/pi/test/testdata/wire-samples.json.
func GenerateSamples() ([]byte, error) {
	msgs, err := sampleMessages()
	if err != nil {
		return nil, err
	}
	doc := map[string]any{
		"generatedBy": "internal/cmd/wirets (make wire): Go-encoded messages and Go's subjects; DO NOT EDIT",
		"messages":    msgs,
		"subjects":    sampleSubjects(),
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "\t")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
