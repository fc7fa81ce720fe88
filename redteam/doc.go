// Package redteam is compactor's red-team suite (`make redteam`; docs/security.md, "The
// red-team suite"): a real nats-server started from the configuration `compactor auth`
// prints for stores hostA and hostB, each store's account set up by its admin's `compactor
// setup`, a real `compactor run` of each store (its worker's key, the OpenAI summarizer
// on a fake model of its own), and then every attack of the cases, each with hostA's keys
// only: its worker's, its agent's and, where it matters, its operator's.
//
// For each case and role the runner waits until hostB is quiet, takes a snapshot of
// everything of hostB's (every message of its streams and buckets but its workers' beats,
// which its own worker rewrites every 10 s; its streams' configurations and consumers; its
// session files, byte for byte; its worker's count of foreign records), runs the attack,
// takes the snapshot again and compares: any difference is a hostB-visible effect. Then,
// with whatever the attack left running (a flood, a full stream), it times hostB's own
// flows: a preparation asked for and read back, bridged to a later cut, deleted once the
// hook reports; an enqueue --wait; a sweep; the median of three rounds of each against the
// same flows timed before any attack (also the median of three rounds). A figure over 2x
// is measured again, the attack still running, up to twice: an attack that slows hostB
// slows every measure, a moment of a loaded machine does not last. The figures are
// printed at the end: the effects (0 is the only passing count), and each flow's ratio to
// its baseline (within 2x passes; a flow faster than redteamFloor counts as redteamFloor,
// so that a few milliseconds of a loaded machine do not make a ratio).
//
// # Adding a case
//
// A case is a Case value given to register, in a file of this package by topic
// (cases_*_test.go), for instance:
//
//	func init() {
//		register(Case{
//			Name:  "a rollup of every key of the prepared values",
//			Roles: []pipeline.Role{pipeline.RoleWorker},
//			Attack: func(ctx context.Context, a *Attacker) (stop func(), err error) {
//				_, err = a.Publish(ctx, "$KV.COMPACTOR_PREPARED.hostA.x", Header{"Nats-Rollup": "all"}, nil)
//				return nil, a.Refused(err, "a rollup") // refused: nil; taken: an error saying so
//			},
//		})
//	}
//
// Attack runs with an Attacker: hostA's connection of the case's role (its inbox, its
// refusals said at once), hostA's store directory and the names of hostB's subjects and
// keys (a.B.*). It returns an error when the attack learned or did what it must not (it
// read something of hostB's, or an operation that must be refused was taken); what the
// attack does to hostB's state is the runner's to find. stop, when not nil, is called
// after hostB's flows were timed: a flood or a held resource lasts until then. Helpers of
// the Attacker: Publish (a JetStream publish with headers), Request (a request with any
// reply subject), Subscribe, CLI (a compactor command with the role's key), Refused (nil
// for a permission refusal or a JetStream error, else an error).
//
// The cases of the files' race (cases_files_test.go: a directory or the session file
// swapped for a symlink during a summary, hard links, a rename, a FIFO or a device) and of
// instructions (cases_instructions_test.go) act on hostA's root (a.Root) and enqueue
// hostA's jobs with the role's key: a.enqueueA waits for the job's final event (read with
// hostA's admin's key: a worker's key may not read events), a.duringSummary runs an attack
// while hostA's summary is held at its fake model (a.HoldSummary), a.ModelA is that model
// (what it was asked), a.victim is hostB's next session file (what a redirected append
// would write); the runner compares every session file of hostB's byte for byte.
//
// What the operator reads (cases_operator_test.go): records that hostA's keys write with
// terminal escapes in every field, read by hostA's operator with dlq, events and status
// (nothing raw, everything shown escaped); records relayed under hostB's names into hostA's
// own account, read by the operators' view of both accounts (none shown as hostB's); pause
// records no store's key may write or read for another.
//
// The web console (cases_console_test.go): `compactor console --credentials` of both
// accounts (a.f.console(), started once) shows both; records with markup in every field
// (a dead letter, an event, a beat and a lease of hostA's worker, a hook report of its
// agent) are inert in every page, whole and partial, and every /api answer
// (console/consoletest: no element, script, handler or URL a record brought; the
// Content-Security-Policy, nosniff, the content type); hostA's worker's and agent's keys
// neither run a console, nor pass for the console's tokens (as a bearer token or a login),
// nor act (the API's actions, pause, resume, dlq), and hostA's own worker serves no console.
//
// Base jobs (cases_basejobs_test.go): every field of a base job a worker acts on (store,
// path, session, anchor, slot, merge, version), published raw on hostA's subjects naming
// hostB's store, file and compaction, or malformed; each job's end is read from its event
// (a.endOf, with hostA's admin's key; a.tryJob publishes and waits). The bound holds
// hostA's model (a.HoldSummary) while many base jobs of one session are published, and
// reads how many the session's subjects hold (a.sessionJobs).
//
// REDTEAM_RUN=REGEXP runs the cases whose names match it only (while writing a case).
//
// The tests carry the build tag redteam: `make test` does not run them.
package redteam
