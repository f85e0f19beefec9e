package doctor

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/android"
	"github.com/vig-edge/vig/jetson"
)

// Profile is what a device can run side by side, so that no remedy asks for
// an accelerator it does not have: its DLA cores (a Jetson) and NPUs (a phone).
type Profile struct {
	Name     string `json:"name"`
	DLACores int    `json:"dla_cores"`
	NPUs     int    `json:"npus"`
	// Why says how the device was recognised (its device tree, Android).
	Why string `json:"why,omitempty"`
}

// phoneProfile is an Android phone: apps reach one NPU (NNAPI or the vendor's
// delegate), and no DLA.
var phoneProfile = Profile{Name: "Android phone", NPUs: 1}

// Profiles are the devices `vig doctor --device NAME` knows, by name: the
// Jetson boards with a short name (jetson.Boards) and "phone".
var Profiles = profiles()

func profiles() map[string]Profile {
	ps := map[string]Profile{"phone": phoneProfile}
	for _, b := range jetson.Boards {
		if b.Short != "" {
			ps[b.Short] = Profile{Name: b.Name, DLACores: b.DLACores}
		}
	}
	return ps
}

// ProfileNames lists the names of Profiles, sorted.
func ProfileNames() []string {
	var ns []string
	for n := range Profiles {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

// DetectProfile recognises the device under root: a Jetson by its device
// tree, a phone by Android's files. ok is false for anything else (a laptop,
// a server): remedies then keep to the limits every device shares.
func DetectProfile(root fs.FS, getenv func(string) string) (p Profile, ok bool) {
	if b, entry, ok := jetson.BoardOf(root); ok {
		return Profile{Name: b.Name, DLACores: b.DLACores, Why: "device tree: " + entry}, true
	}
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if ok, why := android.Detect(root, getenv); ok {
		p = phoneProfile
		p.Why = why
		return p, true
	}
	return Profile{}, false
}

// maxDLACores is the most DLA cores any Jetson has (AGX Orin, Xavier).
var maxDLACores = jetson.MaxDLACores()

// slotLimit is the most slots accelerator name can have on the device, and
// why; why is empty when nothing is known about it. A DLA core (dla0, dla1)
// runs one engine at a time; a pool of DLA cores (dla) has as many slots as
// the board has cores; an NPU runs one job at a time.
func slotLimit(name string, p *Profile) (int, string) {
	if _, ok := config.DLACore(name); ok {
		return 1, "a DLA core runs one engine at a time"
	}
	switch name {
	case "dla":
		if p != nil {
			if p.DLACores == 0 {
				return 0, fmt.Sprintf("%s has no DLA core", article(p.Name))
			}
			return p.DLACores, fmt.Sprintf("%s has %d DLA core%s", article(p.Name), p.DLACores, plural(p.DLACores))
		}
		return maxDLACores, fmt.Sprintf("no Jetson has more than %d DLA cores", maxDLACores)
	case "npu":
		switch {
		case p != nil && p.NPUs == 1:
			return 1, fmt.Sprintf("%s runs one NPU job at a time", article(p.Name))
		case p != nil && p.NPUs > 1:
			return p.NPUs, fmt.Sprintf("%s has %d NPUs, each running one job at a time", article(p.Name), p.NPUs)
		}
	}
	return 0, ""
}

// deviceLimits reports declared accelerators the device does not have, or
// not with that many slots: the analysis would count on parallelism the
// hardware cannot give.
func deviceLimits(l *layout) []Finding {
	var fs []Finding
	for _, a := range l.accels {
		if a.Name == "" {
			continue
		}
		lim, why := slotLimit(a.Name, l.profile)
		core, isCore := config.DLACore(a.Name)
		switch {
		case l.profile != nil && (isCore || a.Name == "dla") && l.profile.DLACores == 0:
			fs = append(fs, Finding{Code: CodeBeyondDevice, Severity: Error, Accelerator: a.Name,
				Message: fmt.Sprintf("%s: %s has no DLA core: its models cannot run there", a.Name, article(l.profile.Name)),
				Numbers: map[string]float64{"dla_cores": 0, "slots": float64(a.Slots)},
				Remedy:  []string{fmt.Sprintf("build the models of %s for the GPU and place them there", a.Name)}})
		case l.profile != nil && isCore && core >= l.profile.DLACores:
			cores := config.DLAName(0)
			if n := l.profile.DLACores; n > 1 {
				cores += "…" + config.DLAName(n-1)
			}
			fs = append(fs, Finding{Code: CodeBeyondDevice, Severity: Error, Accelerator: a.Name,
				Message: fmt.Sprintf("%s: %s has %d DLA core%s (%s): %s does not exist",
					a.Name, article(l.profile.Name), l.profile.DLACores, plural(l.profile.DLACores), cores, a.Name),
				Numbers: map[string]float64{"dla_cores": float64(l.profile.DLACores)},
				Remedy:  []string{fmt.Sprintf("bind its models to a core that exists (secondary_devices device_id < %d) or to the GPU", l.profile.DLACores)}})
		case why != "" && a.Slots > lim:
			fs = append(fs, Finding{Code: CodeBeyondDevice, Severity: Error, Accelerator: a.Name,
				Message: fmt.Sprintf("%s has %d slots, but %s: doctor's analysis and vig's admission would count on jobs running side by side that run one after the other",
					a.Name, a.Slots, why),
				Numbers: map[string]float64{"slots": float64(a.Slots), "limit": float64(lim)},
				Remedy:  []string{fmt.Sprintf("accelerators: {%s: %d}", a.Name, lim)}})
		}
	}
	return fs
}

// layout is where the analysis places every model, and what it knows of
// the device: the accelerators with their slots and interference factors,
// each model's accelerator, instances and variants.
type layout struct {
	accels  []AcceleratorSlots
	models  map[string]ModelPlacement
	profile *Profile
	exec    map[string]float64 // exec_ms by model
	groups  []group            // one per accelerator with streams, once built
}

// layoutOf reads the layout the config describes, after any derivation from
// the server (config.Resolve): the accelerators with their interference
// factors, each model's placement and instances, a logical model's variants,
// and where each came from.
func layoutOf(c *config.Config, p *Profile) *layout {
	l := &layout{models: map[string]ModelPlacement{}, profile: p, exec: map[string]float64{}}
	list := c.AcceleratorList()
	_, specs := c.SchedAccelerators()
	if !(len(list) == 1 && list[0].Name == "") {
		for k, a := range list {
			as := AcceleratorSlots{Name: a.Name, Slots: a.Slots, Source: a.Source.String()}
			if k < len(specs) && specs[k].Name == a.Name {
				as.Interference = specs[k].Interference
			}
			l.accels = append(l.accels, as)
		}
	}
	for _, n := range c.ModelNames() {
		pl := c.PlacementOf(n)
		mp := ModelPlacement{Name: n, Accelerator: pl.Accelerator, Instances: pl.Instances, Variants: c.Models[n].Variants}
		switch {
		case len(mp.Variants) > 0:
			mp.Source = "config" // a logical model is the config's
		case mp.Accelerator != "":
			mp.Source = pl.Source.String()
		}
		l.models[n] = mp
		l.exec[n] = c.Models[n].ExecMs
	}
	return l
}

// named reports whether accelerators are named (not the backend.slots
// shorthand).
func (l *layout) named() bool { return len(l.accels) > 0 }

// accel returns the accelerator called name.
func (l *layout) accel(name string) (AcceleratorSlots, bool) {
	i := slices.IndexFunc(l.accels, func(a AcceleratorSlots) bool { return a.Name == name })
	if i < 0 {
		return AcceleratorSlots{}, false
	}
	return l.accels[i], true
}

// modelList returns the placements in name order.
func (l *layout) modelList() []ModelPlacement {
	out := make([]ModelPlacement, 0, len(l.models))
	for _, m := range l.models {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b ModelPlacement) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// place puts each stream where the analysis runs its frames: its model's
// accelerator, or, for a logical model, the variant whose accelerator has
// the least contracted demand once every stream of a placed model and the
// logical streams before it (class, then max_age order) are counted — a
// static stand-in for vig's choice, per frame, of the variant whose result
// lands first.
func (l *layout) place(c *config.Config) map[string]placed {
	at := map[string]placed{}
	load := map[string]float64{} // contracted demand per slot placed so far
	demand := func(model, accel string, s config.Stream) float64 {
		a, _ := l.accel(accel)
		if s.PeriodMs <= 0 {
			return 0
		}
		return c.Models[model].ExecMs * max(a.Interference, 1) / s.PeriodMs / float64(max(a.Slots, 1))
	}
	var logical []config.Stream
	for _, s := range c.Streams {
		mp := l.models[s.Model]
		if len(mp.Variants) > 0 {
			logical = append(logical, s)
			continue
		}
		if _, ok := l.accel(mp.Accelerator); ok {
			at[s.Name] = placed{accel: mp.Accelerator, model: s.Model}
			load[mp.Accelerator] += demand(s.Model, mp.Accelerator, s)
		}
	}
	slices.SortStableFunc(logical, func(a, b config.Stream) int {
		if d := classRank(a.Class) - classRank(b.Class); d != 0 {
			return d
		}
		if a.MaxAgeMs != b.MaxAgeMs {
			if a.MaxAgeMs < b.MaxAgeMs {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, s := range logical {
		best, bestU := placed{}, 0.0
		for _, v := range l.models[s.Model].Variants {
			vp := l.models[v]
			if _, ok := l.accel(vp.Accelerator); !ok {
				continue
			}
			u := load[vp.Accelerator] + demand(v, vp.Accelerator, s)
			if best.accel == "" || u < bestU {
				best, bestU = placed{accel: vp.Accelerator, model: v}, u
			}
		}
		if best.accel != "" {
			at[s.Name] = best
			load[best.accel] = bestU
		}
	}
	return at
}

// group returns the group of accelerator name, if it has streams.
func (l *layout) group(name string) (group, bool) {
	for _, g := range l.groups {
		if g.accel == name {
			return g, true
		}
	}
	return group{}, false
}

// interference flags a plan that holds only without interference: g was
// analysed with its jobs factor× longer (another accelerator runs beside
// it), and findings the plain exec_ms would not raise appear.
func (g group) interference(c *config.Config, at map[string]placed, with []Finding) []Finding {
	a, _ := g.l.accel(g.accel)
	plain := analyzeGroup(newAccelGroup(c, g.l, a, at, 1))
	seen := map[string]bool{}
	for _, f := range plain {
		if f.Severity >= Warning {
			seen[f.Code+"/"+f.Stream] = true
		}
	}
	var only []string
	worst := Info
	for _, f := range with {
		if f.Severity >= Warning && !seen[f.Code+"/"+f.Stream] {
			what := f.Code
			if f.Stream != "" {
				what += " (" + f.Stream + ")"
			}
			only = append(only, what)
			worst = max(worst, f.Severity)
		}
	}
	if len(only) == 0 {
		return nil
	}
	return []Finding{{
		Code: CodeInterference, Severity: Warning,
		Message: fmt.Sprintf("the plan holds only without interference: with %s's jobs %s× longer while another accelerator runs one (interference: {%s: %s}), %s; with the plain exec_ms it holds",
			g.accel, fmtNum(g.factor), g.accel, fmtNum(g.factor), strings.Join(only, ", ")),
		Numbers: map[string]float64{"interference": g.factor, "worst_severity": float64(worst)},
		Formula: "C_i' = exec_ms_i × interference, in every formula above, whenever another accelerator has work",
		Remedy: []string{
			fmt.Sprintf("lighten %s: the remedies of the findings above are computed with the factor", g.accel),
			"or measure the factor on the device (vig learns it online); a lower one holds if the hardware shows it",
		},
	}}
}

// article puts "a" or "an" before a device's name.
func article(name string) string {
	if name != "" && strings.ContainsRune("AEIOU", rune(name[0])) {
		return "an " + name
	}
	return "a " + name
}
