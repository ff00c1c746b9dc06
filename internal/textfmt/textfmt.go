// Package textfmt holds the text helpers the stagger command and the lab's
// command (stagger-lab) share: numbers, bars, load charts, tables, CSV,
// JSON and wrapping.
package textfmt

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// MS formats a duration in milliseconds with one decimal.
func MS(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

// Float formats x with prec decimals.
func Float(x float64, prec int) string { return strconv.FormatFloat(x, 'f', prec, 64) }

// Bar draws x out of max as a horizontal bar of width cells, in eighths.
func Bar(x, max float64, width int) string {
	if !(max > 0) || !(x > 0) {
		return ""
	}
	eighths := int(math.Round(x / max * float64(width*8)))
	const parts = " ▏▎▍▌▋▊▉"
	var b strings.Builder
	for ; eighths >= 8; eighths -= 8 {
		b.WriteString("█")
	}
	if eighths > 0 {
		b.WriteString(strings.Split(parts, "")[eighths])
	}
	return b.String()
}

// Spark draws counts as one column per value, in eighths of max.
func Spark(counts []int, max int) string {
	const levels = " ▁▂▃▄▅▆▇█"
	ls := strings.Split(levels, "")
	var b strings.Builder
	for _, c := range counts {
		i := 0
		if max > 0 && c > 0 {
			i = int(math.Ceil(float64(c) / float64(max) * 8))
			if i > 8 {
				i = 8
			}
		}
		b.WriteString(ls[i])
	}
	return b.String()
}

// WriteCSV writes header and rows as CSV.
func WriteCSV(w io.Writer, header []string, rows [][]string) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return err
	}
	if err := cw.WriteAll(rows); err != nil {
		return err
	}
	return cw.Error()
}

// WriteJSON writes v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteTable writes rows under header, aligned, with an extra chart column
// that has no header.
func WriteTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// OutageRuler is the time axis under a load chart: one rune per bin of the
// given width, ▔ over the outage [start, end), ┴ at each whole second.
func OutageRuler(width int, bin, start, end time.Duration) string {
	ruler := make([]rune, width)
	for b := range ruler {
		t := time.Duration(b) * bin
		switch {
		case t >= start && t < end:
			ruler[b] = '▔'
		case t%time.Second == 0:
			ruler[b] = '┴'
		default:
			ruler[b] = '─'
		}
	}
	return string(ruler)
}

// WrapText wraps each line of text longer than width at spaces; a
// continuation line is indented 4 more than the line it continues. A word
// longer than the width stays whole. width 0 leaves text as it is.
func WrapText(text string, width int) string {
	if width <= 0 {
		return text
	}
	var b strings.Builder
	for i, line := range strings.Split(text, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		indent := line[:len(line)-len(strings.TrimLeft(line, " "))]
		cont, lead := indent+"    ", len(indent)
		for len(line) > width {
			cut := strings.LastIndexByte(line[:width+1], ' ')
			if cut <= lead {
				// No space within the width: cut after the long word.
				j := strings.IndexByte(line[lead+1:], ' ')
				if j < 0 {
					break
				}
				cut = lead + 1 + j
			}
			b.WriteString(strings.TrimRight(line[:cut], " "))
			b.WriteByte('\n')
			line, lead = cont+strings.TrimLeft(line[cut:], " "), len(cont)
		}
		b.WriteString(line)
	}
	return b.String()
}
