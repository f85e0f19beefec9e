package restfront

// TakeParseTurn takes one of the frontend's JSON parse turns, as a parse in
// progress holds it, until the returned function gives it back.
func (f *Frontend) TakeParseTurn() (giveBack func()) {
	f.parses <- struct{}{}
	return func() { <-f.parses }
}
