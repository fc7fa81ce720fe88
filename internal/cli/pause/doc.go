// Package pause is compactor pause and compactor resume: the operator's record in
// COMPACTOR_SETTINGS that stops a store's workers from taking its jobs during an
// incident, and its removal.
//
// They are operator's programs of their own, so they live apart from package cli, which
// only registers them.
package pause
