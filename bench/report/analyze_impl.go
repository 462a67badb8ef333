package report

func analyze(run *Run, s Settings) *Analysis { return &Analysis{Run: run, Settings: s} }
