package pisession

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// LastEntryID is the id of the last line of the session file (its leaf while nothing has
// branched off).
func LastEntryID(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	var e struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &e); err != nil {
		return "", fmt.Errorf("the last line of %s: %w", file, err)
	}
	return e.ID, nil
}
