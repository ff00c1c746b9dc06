package main

import "github.com/stagger-go/stagger/internal/textfmt"

// The shared text helpers (internal/textfmt), under this command's names.
var (
	ms          = textfmt.MS
	fmtFloat    = textfmt.Float
	bar         = textfmt.Bar
	spark       = textfmt.Spark
	writeCSV    = textfmt.WriteCSV
	writeJSON   = textfmt.WriteJSON
	writeTable  = textfmt.WriteTable
	outageRuler = textfmt.OutageRuler
	wrapText    = textfmt.WrapText
)
