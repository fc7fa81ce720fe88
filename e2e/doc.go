// Package e2e holds the end-to-end suite: the real Pi coding agent (through the
// project's harness interop/pi/pi, PI_VERSION picking the Pi) in RPC mode, working against the scripted model of
// internal/scriptllm, with compactor's own binaries compacting its session. The tests
// carry the build tag e2e, so `go test ./...` and `make test` do not run them; `make e2e`
// does. See README.md in this directory.
package e2e
