package pipeline

import (
	"time"

	"github.com/compactor-dev/compactor/wire"
)

// Report is what RunOnce did.
type Report struct {
	Sweep    *SweepStats      `json:"sweep,omitempty"`
	Rows     []wire.ReportRow `json:"rows"`
	Counts   map[Outcome]int  `json:"counts"`
	Duration time.Duration    `json:"durationNs"`
}

// Failed is the number of jobs that ended failed.
func (r *Report) Failed() int { return r.Counts[OutcomeFailed] }
