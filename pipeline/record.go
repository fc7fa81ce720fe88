package pipeline

import (
	"context"
	"log/slog"
	"time"

	"github.com/compactor-dev/compactor/wire"
)

// What a job tells the world, from whichever path: its event (with its metrics, its log line
// and its report row) and its answers to JetStream, every one checked the same way.

// record publishes ev as its job's event (start: when the delivery began), counts it in the
// metrics and logs it; a final one is also noted for the sweeps and, while RunOnce runs,
// kept for its report.
func (s *Service) record(ctx context.Context, log *slog.Logger, subject string, ev wire.Event, start time.Time) {
	dur := time.Since(start)
	ev.DurationMs = dur.Milliseconds()
	ev.At = time.Now().UTC()
	s.m.jobs.WithLabelValues(ev.Store, ev.Kind, string(ev.Outcome)).Inc()
	s.m.duration.WithLabelValues(ev.Store, ev.Kind, string(ev.Outcome)).Observe(dur.Seconds())
	s.m.countLLM(ev)
	answered(log, slog.LevelWarn, "event not published", publishEvent(ctx, s.res.js, subject, ev))
	if ev.Final() {
		s.noteOutcome(ctx, log, ev)
	}
	// A failed job is a dead letter: an operator looks for it at WARN, with its reason.
	level := slog.LevelInfo
	if ev.Outcome == OutcomeFailed {
		level = slog.LevelWarn
	}
	log.Log(ctx, level, "job "+string(ev.Outcome), "path", ev.Path, "outcome", ev.Outcome, "reason", ev.Reason, "entry", ev.EntryID,
		"tokens_before", ev.TokensBefore, "tokens_after", ev.TokensAfter, "llm_tokens", ev.LLMTokens, "llm_cached_input_tokens", ev.LLMCachedInputTokens,
		"duration_s", seconds(dur), "attempt", ev.Attempt, "error", ev.Error)
	if ev.Final() {
		s.mu.Lock()
		if s.recording {
			s.rows = append(s.rows, wire.ReportRow{JobRef: ev.JobRef, Tally: ev.Tally, Attempts: ev.Attempt, Duration: dur})
		}
		s.mu.Unlock()
	}
}

// answered is the one check of an answer to JetStream about a job: an ack, nak, term or
// in-progress, an event or a dead letter published, the job's lease or attempt count
// written or deleted. A failure is logged at level on log, which carries the job's
// identity, with what (what failed and what follows from it) and the error. It reports
// whether the answer was given.
func answered(log *slog.Logger, level slog.Level, what string, err error) bool {
	if err == nil {
		return true
	}
	log.Log(context.Background(), level, what, "err", err)
	return false
}

func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }
