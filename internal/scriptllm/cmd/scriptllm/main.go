// Command scriptllm runs the scripted OpenAI-compatible model server on its own, for
// trying a real agent against it by hand:
//
//	go run ./internal/scriptllm/cmd/scriptllm --log /tmp/requests.jsonl
//
// It prints the API root (http://127.0.0.1:PORT/v1) on stdout and serves until SIGINT
// or SIGTERM. Agent turns follow the Workload script (bash and read calls on files it
// writes under work/ in the agent's working directory); summary requests get the
// deterministic summary after --summary-delay.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/compactor-dev/compactor/internal/scriptllm"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (default: a random loopback port)")
	summaryDelay := flag.Duration("summary-delay", scriptllm.DefaultSummaryDelay, "how long summarization requests take")
	agentDelay := flag.Duration("agent-delay", 0, "how long agent turns take before they stream")
	seed := flag.Uint64("seed", 1, "workload seed")
	lines := flag.Int("lines", scriptllm.DefaultLines, "lines per generated notes file")
	logFile := flag.String("log", "", "append every request as a JSON line to this file")
	flag.Parse()

	opts := []scriptllm.Option{
		scriptllm.WithSummaryDelay(*summaryDelay),
		scriptllm.WithAgentDelay(*agentDelay),
		scriptllm.WithScript(scriptllm.Workload{Seed: *seed, Lines: *lines}),
	}
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "scriptllm: %v\n", err)
			os.Exit(1)
		}
		defer f.Close()
		opts = append(opts, scriptllm.WithLog(f))
	}
	srv, err := scriptllm.Start(*addr, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "scriptllm: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(srv.URL())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	if err := srv.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "scriptllm: %v\n", err)
		os.Exit(1)
	}
}
