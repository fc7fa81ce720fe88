package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/internal/cli/command"
)

func init() {
	command.Register(&command.Command{Name: "prepare", Summary: "prepare a compaction summary for one session ahead of time (writes nothing)", Run: runPrepare})
}

func runPrepare(ctx context.Context, env *Env) error {
	fs := command.NewFlagSet(env, "prepare", "FILE [--previous PREPARED.json] [--instructions TEXT] [summarizer and planning flags]",
		`Plan and summarize the session at its current leaf, as the workers do for a "prepare" job,
and print the prepared result as JSON (the value the COMPACTOR_PREPARED bucket holds, which
Pi's extension hands to Pi when it compacts: docs/live-agents.md). Nothing is written to the
session, and a turn in progress does not stop it.

With --previous, an earlier result of this command (or of the bucket) for the same session is
the base: only what is new since its cut is summarized, merged into its history with the
update prompt (the result says "incremental": true and how many LLM input tokens it took).`)
	var sf summarizerFlags
	var ef engineFlags
	sf.register(fs.FlagSet)
	ef.register(fs.FlagSet, env.Getenv)
	instructions := instructionsFlag(fs.FlagSet, "; a preparation is valid only for the same instructions")
	previous := fs.String("previous", "", "a previous preparation (JSON) to build on incrementally")
	args, err := fs.ParseArgs(env.Args)
	if err != nil {
		return err
	}
	if err := checkInstructionsFlag(*instructions); err != nil {
		return err
	}
	file, err := command.OneFile(args)
	if err != nil {
		return err
	}
	var prev *engine.Prepared
	if *previous != "" {
		b, err := os.ReadFile(*previous)
		if err != nil {
			return command.Usagef("--previous: %v", err)
		}
		prev = &engine.Prepared{}
		if err := json.Unmarshal(b, prev); err != nil {
			return command.Usagef("--previous %s: not a prepared summary: %v", *previous, err)
		}
	}
	if prev != nil {
		ef.prepareUpdate = engine.PrepareIncremental // what --previous asks for
	}
	eng, err := newEngine(env, &sf, &ef, false)
	if err != nil {
		return err
	}
	pr, res, err := eng.Prepare(ctx, engine.Request{File: file, Instructions: *instructions}, prev)
	if err != nil || pr == nil {
		// A failure, or a skip (nothing to prepare): the result says why.
		if res != nil {
			// The skip's document has said "kind": "" since this command was written (its
			// failure's says "prepare"); kept byte for byte until a change of output.
			res.Kind = ""
		}
		return printResult(env, engine.KindPrepare, file, res, err, false, true)
	}
	if res.Trimmed != nil {
		fmt.Fprintf(env.Stderr, "note: %s: %s\n", file, res.Trimmed)
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(pr)
}
