package pisession

import "os"

// Append writes line and a newline to the end of file as Pi does: Pi's appendFileSync
// opens the file with O_APPEND, writes the line and its newline in one write, and closes
// it; no lock, no fsync. Tests put such writes next to compactor's, as a live agent's.
func Append(file, line string) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
