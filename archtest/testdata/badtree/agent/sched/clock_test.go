package sched

import _ "os"
