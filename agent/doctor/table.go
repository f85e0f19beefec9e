package doctor

import (
	"fmt"
	"io"
	"strings"
)

// wrapWidth is the width the table's text column is wrapped to.
const wrapWidth = 110

// ANSI colours, used only when the caller says the output is a terminal.
const (
	red    = "\x1b[31m"
	yellow = "\x1b[33m"
	green  = "\x1b[32m"
	dim    = "\x1b[2m"
	reset  = "\x1b[0m"
)

// WriteTable writes the report as aligned tables for people: the findings (with
// their formulas and remedies), the device checks, and a summary line with the exit
// code. color adds ANSI colours; pass true only when w is a terminal.
func (r Report) WriteTable(w io.Writer, color bool) error {
	tw := &tableWriter{w: w}
	paint := func(s, c string) string {
		if !color || c == "" {
			return s
		}
		return c + s + reset
	}
	title := "vig doctor"
	if r.Config != "" {
		title += ": " + r.Config
	}
	if len(r.Accelerators) > 0 {
		var parts []string
		for _, a := range r.Accelerators {
			parts = append(parts, fmt.Sprintf("%s %d slot%s", a.Name, a.Slots, plural(a.Slots)))
		}
		tw.printf("%s (%s)\n\n", title, strings.Join(parts, ", "))
	} else if r.Slots > 0 {
		tw.printf("%s (%d slot%s)\n\n", title, r.Slots, plural(r.Slots))
	} else { // a config that could not be read: claim no slots
		tw.printf("%s\n\n", title)
	}
	r.writeLayout(tw)

	codeW := len("CODE")
	for _, f := range r.Findings {
		codeW = max(codeW, len(f.Code))
	}
	// One row per finding (severity, code, stream), its text in a block below,
	// indented to the code column so the rows stay easy to scan.
	sevW := len("SEVERITY")
	indent := sevW + 2
	tw.printf("%-*s  %-*s  %s\n", sevW, "SEVERITY", codeW, "CODE", "STREAM")
	if len(r.Findings) == 0 {
		tw.printf("%-*s  %s\n", sevW, "-", "nothing to report")
	}
	for _, f := range r.Findings {
		sev := paint(fmt.Sprintf("%-*s", sevW, f.Severity), severityColor(f.Severity))
		tw.printf("%s  %-*s  %s\n", sev, codeW, f.Code, orDash(f.Stream))
		paras := []string{f.Message}
		if f.Formula != "" {
			paras = append(paras, "formula: "+f.Formula)
		}
		for _, rem := range f.Remedy {
			paras = append(paras, "remedy: "+rem)
		}
		for _, p := range paras {
			for k, l := range wrap(p, wrapWidth-indent-2) {
				if k == 0 {
					l = paintAux(l, color)
				} else {
					l = "  " + l // continuation of a wrapped paragraph
				}
				tw.printf("%*s%s\n", indent, "", l)
			}
		}
	}

	if len(r.Checks) > 0 {
		nameW, stW := len("CHECK"), len("STATUS")
		for _, c := range r.Checks {
			nameW = max(nameW, len(c.Name))
		}
		stW = max(stW, len("skipped"))
		indent := stW + 2 + nameW + 2
		tw.printf("\n%-*s  %-*s  %s\n", stW, "STATUS", nameW, "CHECK", "DETAIL")
		for _, c := range r.Checks {
			st := paint(fmt.Sprintf("%-*s", stW, c.Status), statusColor(c.Status))
			lines := wrap(c.Detail, wrapWidth-indent)
			tw.printf("%s  %-*s  %s\n", st, nameW, c.Name, lines[0])
			for _, l := range lines[1:] {
				tw.printf("%*s  %s\n", indent, "", l)
			}
		}
	}

	var nw, ne int
	for _, f := range r.Findings {
		switch f.Severity {
		case Warning:
			nw++
		case Error:
			ne++
		}
	}
	for _, c := range r.Checks {
		switch c.Status {
		case Warn:
			nw++
		case Fail:
			ne++
		}
	}
	verdict := "clean"
	switch r.Worst() {
	case Warning:
		verdict = paint("warnings", yellow)
	case Error:
		verdict = paint("errors", red)
	}
	tw.printf("\n%s: %d error%s, %d warning%s (exit %d)\n", verdict, ne, plural(ne), nw, plural(nw), r.ExitCode())
	return tw.err
}

// writeLayout prints the device, the accelerators and where each model runs,
// with where each came from when known.
func (r Report) writeLayout(tw *tableWriter) {
	if d := r.Device; d != nil {
		tw.printf("device: %s (%d DLA core%s, %d NPU%s", d.Name, d.DLACores, plural(d.DLACores), d.NPUs, plural(d.NPUs))
		if d.Why != "" {
			tw.printf("; %s", d.Why)
		}
		tw.printf(")\n\n")
	}
	if len(r.Models) == 0 {
		return
	}
	rows := [][]string{{"ACCELERATOR", "SLOTS", "INTERFERENCE", "SOURCE"}}
	for _, a := range r.Accelerators {
		f := "-"
		if a.Interference > 0 {
			f = "×" + fmtNum(a.Interference)
		}
		rows = append(rows, []string{a.Name, fmt.Sprint(a.Slots), f, orDash(a.Source)})
	}
	tw.columns(rows)
	rows = [][]string{{"MODEL", "ACCELERATOR", "INSTANCES", "SOURCE"}}
	for _, m := range r.Models {
		on, inst := orDash(m.Accelerator), "-"
		if len(m.Variants) > 0 {
			var vs []string
			for _, v := range m.Variants {
				vs = append(vs, v+" ("+r.accelOf(v)+")")
			}
			on = "variants " + strings.Join(vs, ", ")
		} else if m.Instances > 0 {
			inst = fmt.Sprint(m.Instances)
		}
		rows = append(rows, []string{m.Name, on, inst, orDash(m.Source)})
	}
	tw.printf("\n")
	tw.columns(rows)
	tw.printf("\n")
}

// accelOf is the accelerator model runs on in the report's layout.
func (r Report) accelOf(model string) string {
	for _, m := range r.Models {
		if m.Name == model {
			return orDash(m.Accelerator)
		}
	}
	return "-"
}

// paintAux dims the "formula:" and "remedy:" labels.
func paintAux(l string, color bool) string {
	if !color || !(strings.HasPrefix(l, "formula: ") || strings.HasPrefix(l, "remedy: ")) {
		return l
	}
	k, v, _ := strings.Cut(l, ": ")
	return dim + k + ":" + reset + " " + v
}

func severityColor(s Severity) string {
	switch s {
	case Warning:
		return yellow
	case Error:
		return red
	}
	return dim
}

func statusColor(s Status) string {
	switch s {
	case OK:
		return green
	case Warn:
		return yellow
	case Fail:
		return red
	}
	return dim
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// wrap breaks text into lines of at most width runes at spaces (a longer word
// stays whole). It always returns at least one line.
func wrap(text string, width int) []string {
	width = max(width, 40)
	var lines []string
	var cur []string
	n := 0
	for _, word := range glueUnits(strings.Fields(text)) {
		wl := len([]rune(word))
		if n > 0 && n+1+wl > width {
			lines = append(lines, strings.Join(cur, " "))
			cur, n = nil, 0
		}
		if n > 0 {
			n++
		}
		cur = append(cur, word)
		n += wl
	}
	if len(cur) > 0 || len(lines) == 0 {
		lines = append(lines, strings.Join(cur, " "))
	}
	return lines
}

// glueUnits keeps a unit on the line of its number ("18 ms" never breaks).
func glueUnits(words []string) []string {
	out := words[:0:0]
	for _, w := range words {
		unit := strings.TrimRight(w, "),.;:")
		if len(out) > 0 && (unit == "ms" || unit == "s" || unit == "Hz" || unit == "GHz" || unit == "°C") {
			out[len(out)-1] += " " + w
			continue
		}
		out = append(out, w)
	}
	return out
}

// tableWriter remembers the first write error so the table code stays readable.
type tableWriter struct {
	w   io.Writer
	err error
}

// columns prints rows aligned in columns; the last column is not padded.
func (t *tableWriter) columns(rows [][]string) {
	var w []int
	for _, r := range rows {
		for k, c := range r {
			if k >= len(w) {
				w = append(w, 0)
			}
			w[k] = max(w[k], len([]rune(c)))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for k, c := range r {
			if k == len(r)-1 {
				b.WriteString(c)
				break
			}
			b.WriteString(c + strings.Repeat(" ", w[k]-len([]rune(c))+2))
		}
		t.printf("%s\n", b.String())
	}
}

func (t *tableWriter) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}
