package jetson

import (
	"bytes"
	"io/fs"
	"strings"
)

// Board is a Jetson module, or its SoC when the module is not known, and
// what vig can run side by side on it: its DLA cores (accelerators dla0,
// dla1, … of one slot each).
type Board struct {
	Name     string // "Jetson AGX Orin"
	DLACores int
	// Compatible is the device-tree compatible string that names the board
	// ("nvidia,p3701"); one that extends it with "-…" names it too
	// ("nvidia,p3701-0005").
	Compatible string
	// Short names the board for `vig doctor --device` ("orin"); "" when it
	// has no such name.
	Short string
}

// Boards are the boards vig knows, the most specific first: the modules
// (p3701 AGX Orin, p3767-000N Orin NX and Nano, p2888 AGX Xavier, p3668
// Xavier NX), then the SoCs for a module not listed, with the most DLA cores
// any module of that SoC has.
var Boards = []Board{
	{Name: "Jetson AGX Orin", DLACores: 2, Compatible: "nvidia,p3701", Short: "orin"},
	{Name: "Jetson Orin NX 16GB", DLACores: 2, Compatible: "nvidia,p3767-0000", Short: "orin-nx"},
	{Name: "Jetson Orin NX 8GB", DLACores: 1, Compatible: "nvidia,p3767-0001", Short: "orin-nx-8gb"},
	{Name: "Jetson Orin Nano 8GB", DLACores: 0, Compatible: "nvidia,p3767-0003"},
	{Name: "Jetson Orin Nano 4GB", DLACores: 0, Compatible: "nvidia,p3767-0004"},
	{Name: "Jetson Orin Nano 8GB", DLACores: 0, Compatible: "nvidia,p3767-0005", Short: "orin-nano"}, // the developer kit's
	{Name: "Jetson AGX Xavier", DLACores: 2, Compatible: "nvidia,p2888", Short: "xavier"},
	{Name: "Jetson Xavier NX", DLACores: 2, Compatible: "nvidia,p3668", Short: "xavier-nx"},
	{Name: "Jetson Orin", DLACores: 2, Compatible: "nvidia,tegra234"},
	{Name: "Jetson Xavier", DLACores: 2, Compatible: "nvidia,tegra194"},
	{Name: "Jetson TX2", DLACores: 0, Compatible: "nvidia,tegra186"},
	{Name: "Jetson Nano", DLACores: 0, Compatible: "nvidia,tegra210"},
}

// BoardOf recognises the board under root by its device tree
// (DeviceTreeCompatible): the first of Boards that an entry of the device
// tree names, and that entry.
func BoardOf(root fs.FS) (b Board, entry string, ok bool) {
	data, err := fs.ReadFile(root, rel(DeviceTreeCompatible))
	if err != nil {
		return Board{}, "", false
	}
	compat := bytes.Split(bytes.TrimRight(data, "\x00"), []byte{0})
	for _, b := range Boards {
		for _, c := range compat {
			if s := string(c); s == b.Compatible || strings.HasPrefix(s, b.Compatible+"-") {
				return b, s, true
			}
		}
	}
	return Board{}, "", false
}

// MaxDLACores is the most DLA cores any of Boards has.
func MaxDLACores() int {
	n := 0
	for _, b := range Boards {
		n = max(n, b.DLACores)
	}
	return n
}
