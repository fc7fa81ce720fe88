// Command compactor compacts and summarizes Pi coding-agent sessions. See README.md.
package main

import (
	"os"

	"github.com/compactor-dev/compactor/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
