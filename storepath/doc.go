// Package storepath is where a job's session file is: a path relative to its store's root,
// resolved to a file beneath that root that a job may touch (no escape by a symlink, a
// regular file with one link, a .jsonl), found again by its session id when it was moved
// while its job was queued, and the relative path a client names in a job.
//
// It is separate because a worker's delivery, its bridges and the enqueue client all
// resolve paths by these rules, and none of them needs NATS for it.
package storepath
