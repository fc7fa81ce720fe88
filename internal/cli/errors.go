package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"syscall"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// inputError decides a failure's exit code by its cause, the one rule for every command:
//
//   - bad input, exit 2: a file that does not exist or is a directory, a session file
//     compactor cannot read as one (no header, a cycle, an invalid entry...), an entry id
//     the file does not have, a configuration the endpoint refuses (HTTP 401/403);
//   - failed, exit 1: everything else, permission denied included (the input may be
//     fine: the process lacks the right), a session that changed meanwhile, I/O errors,
//     an LLM that fails.
//
// It returns err wrapped in a UsageError for exit 2, else err unchanged.
func inputError(err error) error {
	if err == nil {
		return nil
	}
	var ie *engine.InputError
	var se *summarize.Error
	var pe *fs.PathError
	var fe *sessionio.FileError
	switch {
	case errors.Is(err, os.ErrPermission), errors.Is(err, sessionio.ErrChanged):
		return err
	case errors.As(err, &ie):
		return &command.UsageError{Err: err}
	case errors.As(err, &se) && (se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden):
		return &command.UsageError{Err: fmt.Errorf("%w (the endpoint refused the credentials: give the API key in OPENAI_API_KEY, --api-key-env or --api-key-file)", err)}
	case errors.As(err, &pe):
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.EISDIR) {
			return &command.UsageError{Err: err}
		}
		return err
	case errors.As(err, &fe), errors.Is(err, os.ErrNotExist):
		return &command.UsageError{Err: err} // the file's content: not a session compactor can read
	}
	return err
}
