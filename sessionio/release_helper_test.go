package sessionio

import (
	"github.com/compactor-dev/compactor/pi"
)

// pi073 is Pi 0.73.1, whose rules the tests compare with the newest.
var pi073 = pi.MustParseRelease("0.73.1")
