package validate

func validate(in *Input) *Result {
	r := &Result{}
	r.Valid = true
	for _, c := range r.violations() {
		if c.v != 0 {
			r.Valid = false
		}
	}
	return r
}
