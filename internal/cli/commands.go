package cli

import (
	"github.com/compactor-dev/compactor/internal/cli/auth"
	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/internal/cli/dlq"
	"github.com/compactor-dev/compactor/internal/cli/events"
	"github.com/compactor-dev/compactor/internal/cli/pause"
	"github.com/compactor-dev/compactor/internal/cli/setup"
	"github.com/compactor-dev/compactor/internal/cli/status"
)

// The commands that are programs of their own live in packages named for them; the rest
// register themselves in their files' init.
func init() {
	for _, c := range []*command.Command{auth.Command, dlq.Command, setup.Command, status.Command, events.Command, pause.Pause, pause.Resume} {
		command.Register(c)
	}
}
