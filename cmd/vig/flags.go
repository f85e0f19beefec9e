package main

import "flag"

// The flags every command spells the same way: -c/--config FILE for a config,
// --json for "write JSON to stdout instead of the table", --no-device-checks (or
// its short form --no-device) to skip doctor's device checks. Go's flag package
// accepts one or two dashes alike.

// configFlag defines -c and --config on fs, both setting the returned path.
func configFlag(fs *flag.FlagSet, def, usage string) *string {
	p := new(string)
	fs.StringVar(p, "c", def, usage)
	fs.StringVar(p, "config", def, "same as -c")
	return p
}

// noDeviceFlag defines --no-device-checks and its short form --no-device.
func noDeviceFlag(fs *flag.FlagSet, usage string) *bool {
	p := new(bool)
	fs.BoolVar(p, "no-device-checks", false, usage)
	fs.BoolVar(p, "no-device", false, "same as --no-device-checks")
	return p
}
