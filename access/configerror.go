package access

import "fmt"

// ConfigError is a Config field that does not validate. Its text is "config: Field: what";
// a command line can name the flag behind Field instead (errors.As finds it).
type ConfigError struct {
	Field string // the field's path in Config, e.g. "Concurrency", "Stores[1].Dir", "NATS.TLSCA"
	Err   error  // what is wrong with it
}

func (e *ConfigError) Error() string { return "config: " + e.Field + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// ConfigErrorf builds a ConfigError; format and args say what is wrong (%w wraps).
func ConfigErrorf(field, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}
