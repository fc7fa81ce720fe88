// Package natstest starts the real nats-servers tests run against, each on loopback ports
// chosen at random, so that every package's tests start NATS the same way:
//
//   - StartServer, StartServerWith and StartServerFrom: one server in the test's process,
//     JetStream on, its store in a temp dir (StartServerFrom from a configuration file, the
//     accounts and users `compactor auth` prints, say);
//   - StartRestartable: one such server that a test stops and starts again on the same port
//     and store, an outage as clients see it;
//   - StartCluster and StartClusterWith: three routed nodes, each in a child process (the
//     test binary itself, re-executed), so that killing a node is a real SIGKILL: no leader
//     hand-over, no goodbye to its peers or clients. Ports are chosen free once and kept,
//     so a node restarts where the others (and the clients) expect it. A test binary using
//     them calls MaybeRunNode first in its TestMain.
//
// It is a package of its own (used only by tests) so that no test writes its own start-up.
package natstest
