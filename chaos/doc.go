// Package chaos is compactor's reliability suite (`make chaos`): real compactor processes
// built from the checkout, real nats-servers (one, or three clustered, each in its own
// process so that a kill is a SIGKILL), a fake OpenAI-compatible endpoint over loopback
// HTTP that misbehaves on purpose, and stores holding bad files. After each scenario every
// session file is checked against its bytes from before (only appends), every compaction
// is counted per leaf (none twice from the same one), and every file is loaded by the real
// Pi (the project's harness interop/pi/pi; PI_VERSION picks the Pi). The tests carry the build tag chaos: `make test` does not
// run them. docs/reliability.md has what is promised and the figures.
package chaos
