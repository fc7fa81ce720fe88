package command

import "runtime/debug"

// version is set at build time: go build -ldflags "-X github.com/compactor-dev/compactor/internal/cli/command.version=v1.2.3"
// (the Makefile stamps `git describe`).
var version = ""

// Version is the version stamped at build time, else the module version a `go install
// module@version` recorded, else the VCS revision Go recorded for a build in a checkout,
// else "dev".
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		return "dev-" + rev + dirty
	}
	return "dev"
}
