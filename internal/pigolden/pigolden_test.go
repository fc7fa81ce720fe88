package pigolden

import (
	"errors"
	"os"
	"testing"
)

// TestEveryCorpusFileHasGoldens: for each version of the matrix, every corpus file has
// either all its goldens or an error golden, and each golden names its file.
func TestEveryCorpusFileHasGoldens(t *testing.T) {
	versions, err := Versions()
	if err != nil {
		t.Fatal(err)
	}
	files, err := CorpusFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		loadable := 0
		for _, f := range files {
			var e struct {
				File     string `json:"file"`
				ExitCode int    `json:"exitCode"`
			}
			if err := Load(v, f.Name, "error", &e); err == nil {
				if e.File != f.Rel || e.ExitCode != 2 {
					t.Errorf("%s %s.error.json: file %q exit %d", v, f.Name, e.File, e.ExitCode)
				}
				continue
			} else if !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			loadable++
			for _, k := range Kinds {
				var g struct {
					PiVersion string `json:"piVersion"`
					File      string `json:"file"`
				}
				if err := Load(v, f.Name, k, &g); err != nil {
					t.Errorf("%s: %v", v, err)
					continue
				}
				if g.PiVersion != v || g.File != f.Rel {
					t.Errorf("%s %s.%s.json: piVersion %q file %q, want %s %s", v, f.Name, k, g.PiVersion, g.File, v, f.Rel)
				}
			}
		}
		if loadable < 40 {
			t.Errorf("%s: only %d loadable corpus files", v, loadable)
		}
	}
}

func TestHarnessDefaultsToTheRepository(t *testing.T) {
	t.Setenv("PI_HARNESS", "")
	h, err := Harness()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(h); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("%s: not an executable (%v)", h, err)
	}
}
