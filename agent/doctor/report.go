package doctor

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// Severity ranks findings; the exit code of `vig doctor` is that of the worst.
type Severity int

// Severities, in increasing order.
const (
	Info Severity = iota
	Warning
	Error
)

func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warning:
		return "warning"
	case Error:
		return "error"
	}
	return fmt.Sprintf("severity(%d)", int(s))
}

// MarshalText writes the severity's name, which is what --json shows.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a severity's name.
func (s *Severity) UnmarshalText(b []byte) error {
	for _, v := range []Severity{Info, Warning, Error} {
		if v.String() == string(b) {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("unknown severity %q", b)
}

// Finding codes. They are stable: scripts and dashboards match on them.
const (
	CodeConfigInvalid         = "CONFIG_INVALID"
	CodeUtilization           = "UTILIZATION"
	CodeProtectedUnsched      = "PROTECTED_WORKLOAD_UNSCHEDULABLE"
	CodeHighOverbooked        = "HIGH_WORKLOAD_OVERBOOKED"
	CodeResponseTime          = "RESPONSE_TIME"
	CodeProtectedGuarantee    = "PROTECTED_GUARANTEE"
	CodeLongJobBlocks         = "LONG_JOB_BLOCKS_PROTECTED"
	CodeLongJobBlocksHigh     = "LONG_JOB_BLOCKS_HIGH"
	CodeStreamStarves         = "STREAM_STARVES"
	CodeSensorRateExceeds     = "SENSOR_RATE_EXCEEDS_CAPACITY"
	CodeFrameSlowerThanPeriod = "FRAME_SLOWER_THAN_PERIOD"
	CodeBatching              = "BATCHING"
	CodeInterference          = "INTERFERENCE_BREAKS_PLAN"
	CodeBeyondDevice          = "ACCELERATOR_BEYOND_DEVICE"
	CodeStreamUnplaced        = "STREAM_UNPLACED"
	CodeInstancesOverbooked   = "MODEL_INSTANCES_OVERBOOKED"
)

// Finding is one result of the static analysis.
type Finding struct {
	Code     string   `json:"code"`
	Severity Severity `json:"severity"`
	// Stream is the stream the finding is about; empty for the whole slot group.
	Stream string `json:"stream,omitempty"`
	// Accelerator names the accelerator whose slots the finding is about, when
	// accelerators are declared.
	Accelerator string `json:"accelerator,omitempty"`
	// Blockers names the lower-priority streams whose jobs cause the finding.
	Blockers []string `json:"blockers,omitempty"`
	Message  string   `json:"message"`
	// Formula is the rule that produced the numbers, written out.
	Formula string `json:"formula,omitempty"`
	// Numbers holds the figures of Message for machines (milliseconds, ratios, Hz).
	Numbers map[string]float64 `json:"numbers,omitempty"`
	Remedy  []string           `json:"remedy,omitempty"`
	// Line is the config line of the problem (CONFIG_INVALID, or the stream's line).
	Line int `json:"line,omitempty"`
}

// Status is the outcome of one device check.
type Status int

// Statuses of a device check.
const (
	OK Status = iota
	Skipped
	Warn
	Fail
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Skipped:
		return "skipped"
	case Warn:
		return "warn"
	case Fail:
		return "fail"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// MarshalText writes the status's name.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a status's name.
func (s *Status) UnmarshalText(b []byte) error {
	for _, v := range []Status{OK, Skipped, Warn, Fail} {
		if v.String() == string(b) {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("unknown status %q", b)
}

// severity maps a check's status onto the findings' scale: a failed check is an
// error, a warning a warning; ok and skipped add nothing.
func (s Status) severity() Severity {
	switch s {
	case Warn:
		return Warning
	case Fail:
		return Error
	}
	return Info
}

// Check is one device check: what was looked at, how it went, and the evidence (or,
// for Skipped, the reason it could not run).
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
}

// Report is everything doctor found about one config and one device.
type Report struct {
	Config string `json:"config,omitempty"` // file name, when known
	Slots  int    `json:"slots"`
	// Accelerators lists the accelerators (none for backend.slots), and
	// Models where each model runs: the layout the analysis used.
	Accelerators []AcceleratorSlots `json:"accelerators,omitempty"`
	Models       []ModelPlacement   `json:"models,omitempty"`
	// Device is the device whose limits the remedies keep to, when known.
	Device   *Profile  `json:"device,omitempty"`
	Findings []Finding `json:"findings"`
	Checks   []Check   `json:"checks,omitempty"`
}

// AcceleratorSlots is one accelerator of the layout.
type AcceleratorSlots struct {
	Name  string `json:"name"`
	Slots int    `json:"slots"`
	// Interference is the factor its jobs take longer by while another
	// accelerator runs one (0: none given).
	Interference float64 `json:"interference,omitempty"`
	// Source says where the accelerator comes from: "config" or "server".
	Source string `json:"source,omitempty"`
}

// ModelPlacement is where a model runs.
type ModelPlacement struct {
	Name        string `json:"name"`
	Accelerator string `json:"accelerator,omitempty"`
	// Instances is how many of its jobs the accelerator runs at once (0:
	// as many as the slots).
	Instances int `json:"instances,omitempty"`
	// Variants are the models a logical model's frames run as.
	Variants []string `json:"variants,omitempty"`
	// Source says where the placement comes from: "config" or "server".
	Source string `json:"source,omitempty"`
}

// Worst returns the highest severity among the findings and checks (Info when clean).
func (r Report) Worst() Severity {
	w := Info
	for _, f := range r.Findings {
		w = max(w, f.Severity)
	}
	for _, c := range r.Checks {
		w = max(w, c.Status.severity())
	}
	return w
}

// ExitCode is the process exit code for the report: 0 clean, 1 warnings, 2 errors.
func (r Report) ExitCode() int { return int(r.Worst()) }

// Has reports whether a finding with the code is present.
func (r Report) Has(code string) bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Code == code })
}

// sortFindings orders findings by decreasing severity, then code and stream, so that
// output is stable and the worst comes first.
func sortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(b.Severity, a.Severity), cmp.Compare(a.Code, b.Code), cmp.Compare(a.Stream, b.Stream))
	})
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	return enc.Encode(r)
}
