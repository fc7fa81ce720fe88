package fleetops

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Reading the jobs and dead letters by subject.

// SessionTokenOf is the session token of a compactor.dlq.<store>.<token> subject (a job
// subject's dead letter subject).
func SessionTokenOf(subject string) string {
	parts := strings.Split(subject, ".")
	if len(parts) >= 4 {
		return parts[3]
	}
	return ""
}

// CountSubjects counts the messages of stream str under the subject filter.
func CountSubjects(ctx context.Context, str jetstream.Stream, filter string) (uint64, error) {
	info, err := str.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

// OldestJob is when the first job of COMPACTOR_JOBS under filter was queued (zero: none).
// It reads by sequence (a direct get of the next message on the filter), which a
// permission cannot scope to a store: the operator's and the admin's right.
func OldestJob(ctx context.Context, jobs jetstream.Stream, filter string) (time.Time, error) {
	m, err := jobs.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return m.Time.UTC(), nil
}
