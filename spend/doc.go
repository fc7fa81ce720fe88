// Package spend is a fleet's spend limits: input tokens per hour and per day, for all stores
// and per store, shared by the whole fleet. Each window of each limit is a count in
// COMPACTOR_SPEND (a key per scope
// and window, e.g. all.h2026120314, store.team.d20261203), written with optimistic
// concurrency by every worker that has the limit: a fleet limit, not a per-process one.
//
// A job asks before its first paid call (pipeline.ReserveLLM, with the tokens its first request
// will send): when every window it counts against has room (its count is below its limit),
// the estimate is added to each and the job pays; when one is full, the job is held: handed
// back without an attempt, delivered again when that window ends; never failed, never
// dead-lettered. A job that pays is never stopped: its later calls are added without a
// check, and at its end its estimate is replaced by the input tokens the endpoint billed.
// Windows start at whole UTC hours and days.
//
// What this bounds: a window's count only grows past its limit by the job that was
// admitted while it was below, so the fleet's input tokens in a window stay at most the
// limit plus one job's (plus what the estimates missed of the jobs that were paying when
// the window filled: the estimate is the first request's prompt, at four characters a
// token; a span sent in chunks costs more).
//
// It is separate from the worker runtime (package pipeline), which asks it before a job's
// first paid call and settles after the job: the limits, their windows and their counts
// are the fleet's, not one delivery's.
package spend
