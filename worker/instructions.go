package worker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// RefuseInstructions wraps h: a job that carries summary instructions for a store that
// refuses them ends skipped, with the reason, before anything is read or paid for. It is a
// refusal, not a failure: nothing for the operator to retry; the requester sees why and may
// ask again without them. refuse maps a store's name to whether it refuses instructions
// (--store-instructions); "*" stands for every store without an entry of its own. With no
// entry at all, h is returned as it is.
func RefuseInstructions(refuse map[string]bool, log *slog.Logger, h pipeline.Handler) pipeline.Handler {
	if len(refuse) == 0 {
		return h
	}
	return pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
		if job.Instructions != "" && refuses(refuse, job.Store) {
			log.Warn("job with summary instructions refused: the store takes none", "store", job.Store, "session", job.SessionID,
				"kind", job.Kind, "job", job.ID, "instructions_bytes", len(job.Instructions))
			return wire.Result{}, pipeline.Skip(fmt.Sprintf("instructions refused: store %s takes no summary instructions (--store-instructions %s=refuse); ask again without them", job.Store, job.Store))
		}
		return h.Handle(ctx, job, file)
	})
}

// refuses reports whether store refuses instructions.
func refuses(refuse map[string]bool, store string) bool {
	if r, ok := refuse[store]; ok {
		return r
	}
	return refuse["*"]
}
