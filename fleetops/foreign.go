package fleetops

import "fmt"

// ForeignError is a record that names another store or session than where it came from.
type ForeignError struct {
	Kind  string // hook, bridge, prepared, beat, owner, sweep, event, dead letter
	Where string // the subject or key it came on
	// Store and Session are those of Where; Names* what the record says.
	Store, Session           string
	NamesStore, NamesSession string
}

func (e *ForeignError) Error() string {
	if e.NamesStore != e.Store {
		return fmt.Sprintf("%s on %s (store %s) names store %q: a record is trusted only within its store; refused", e.Kind, e.Where, e.Store, e.NamesStore)
	}
	return fmt.Sprintf("%s on %s (store %s, session %s) names session %q: refused", e.Kind, e.Where, e.Store, e.Session, e.NamesSession)
}
