// Command enqueue publishes a compaction (or branch summary) job for one Pi session file to
// a compactor's NATS JetStream, and with --wait waits for its result: `compactor enqueue`
// under its own name, for agents and harnesses. See README.md.
package main

import (
	"os"

	"github.com/compactor-dev/compactor/internal/cli"
)

func main() { os.Exit(cli.MainEnqueue(os.Args[1:])) }
