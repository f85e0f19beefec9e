package trace

var (
	CodeNames = codeNames[:]
	Cnames    = outcomeCnames[:]
)

var (
	SynthWindow         = synthWindow
	StreamColour        = func(i int32) string { return streamColour(i, 4) }
	SVGRuleColour       = svgRuleColour
	SVGLabelPct         = svgLabelPct
	SVGLabelBg          = svgLabelBg
	SVGLateColour       = svgLateColour
	SVGSupersededColour = svgSupersededColour
)
