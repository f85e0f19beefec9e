package trace

var (
	OutcomeNames = outcomeNames[:]
	ReasonTexts  = reasonTexts[:]
	CodeNames    = codeNames[:]
)
