package frontend_test

import "github.com/vig-edge/vig/netopt"

type netoptStats = netopt.Stats
