package access

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Files in the data directory of the embedded server.
const (
	lockFileName    = "compactor.lock"
	ServiceFileName = "service.json"
)

// ServiceInfo is what a service running an embedded server writes into its data directory
// (service.json) so that other processes on this machine find it: `run --once` joins it,
// and clients without --nats-url use its URL. It holds no secret, only the auth mode.
type ServiceInfo struct {
	PID       int    `json:"pid"`
	ClientURL string `json:"clientUrl"`
	Auth      string `json:"auth"` // none, token or user: what a client must bring
	// TokenFile is the generated token's file (readable by the data directory's owner
	// only), when the server requires it; TLSCert the server's certificate when it speaks
	// TLS (a client on this machine trusts it).
	TokenFile string    `json:"tokenFile,omitempty"`
	TLSCert   string    `json:"tlsCert,omitempty"`
	Worker    string    `json:"worker"`
	Once      bool      `json:"once,omitempty"` // a `run --once`, which exits when done
	Started   time.Time `json:"startedAt"`
}

// DataDirBusyError is returned when another process holds the lock on a data directory:
// two nats-servers on one JetStream store corrupt each other's view of it.
type DataDirBusyError struct {
	Dir  string
	Info *ServiceInfo // nil if the holder wrote none (yet)
}

func (e *DataDirBusyError) Error() string {
	msg := fmt.Sprintf("data directory %s is in use by another compactor", e.Dir)
	if i := e.Info; i != nil {
		kind := "service"
		if i.Once {
			kind = "run --once"
		}
		msg += fmt.Sprintf(" (%s, pid %d, NATS %s, since %s)", kind, i.PID, i.ClientURL, i.Started.Local().Format(time.DateTime))
	}
	msg += ": two servers cannot share one JetStream store; stop it, give this one another --data-dir"
	if e.Info != nil && e.Info.ClientURL != "" {
		msg += ", or join it with --nats-url " + e.Info.ClientURL
	}
	return msg
}

// DataDir is a locked data directory: the lock (flock on compactor.lock) is held for the
// life of the process's embedded server and released by the kernel if the process dies.
type DataDir struct {
	dir  string
	lock *os.File
}

// Dir is the locked directory.
func (d *DataDir) Dir() string { return d.dir }

// LockDataDir creates dir if needed and takes its lock, or returns *DataDirBusyError at
// once. A few quick retries cover a client probing the lock at the same instant.
func LockDataDir(dir string) (*DataDir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	for try := 0; ; try++ {
		err = flock(f, true)
		if err == nil {
			return &DataDir{dir: dir, lock: f}, nil
		}
		if !errors.Is(err, errLocked) {
			f.Close()
			return nil, fmt.Errorf("data directory %s: lock: %w", dir, err)
		}
		if try == 4 {
			f.Close()
			info, _ := ReadServiceInfo(dir)
			return nil, &DataDirBusyError{Dir: dir, Info: info}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WriteInfo publishes info in the data directory (written whole, then renamed into place).
func (d *DataDir) WriteInfo(info ServiceInfo) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(d.dir, ServiceFileName+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, ServiceFileName)); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	return nil
}

// Release removes the service file and drops the lock.
func (d *DataDir) Release() {
	_ = os.Remove(filepath.Join(d.dir, ServiceFileName))
	_ = funlock(d.lock)
	_ = d.lock.Close()
}

func ReadServiceInfo(dir string) (*ServiceInfo, error) {
	b, err := os.ReadFile(filepath.Join(dir, ServiceFileName))
	if err != nil {
		return nil, err
	}
	var info ServiceInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ServiceFileName), err)
	}
	return &info, nil
}

// RunningService returns the service that holds dataDir's lock, as it described itself,
// or nil when none does (a service.json left by a killed process is ignored: its lock
// went with it).
func RunningService(dataDir string) *ServiceInfo {
	f, err := os.Open(filepath.Join(dataDir, lockFileName))
	if err != nil {
		return nil
	}
	defer f.Close()
	if err := flock(f, false); err == nil {
		_ = funlock(f)
		return nil // nobody holds it exclusively
	}
	info, err := ReadServiceInfo(dataDir)
	if err != nil {
		return nil
	}
	return info
}

// DefaultDataDir is the data directory used when none is given: $COMPACTOR_DATA_DIR, else
// ~/.compactor (getenv may be nil).
func DefaultDataDir(getenv func(string) string) string {
	if getenv != nil {
		if d := getenv("COMPACTOR_DATA_DIR"); d != "" {
			return d
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".compactor")
	}
	return ""
}

// LocalClientURL is where a client on this machine looks for NATS when no URL is given:
// the embedded server of the service running on dataDir (it may listen on a port of its
// choosing, see --listen), else DefaultClientURL. LocalNATS also finds its credentials.
func LocalClientURL(dataDir string) string { return LocalNATS(dataDir, NATSConfig{}).URL }
