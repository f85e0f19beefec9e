package trace

var (
	OutcomeNames = outcomeNames[:]
	ReasonTexts  = reasonTexts[:]
	CodeNames    = codeNames[:]
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
