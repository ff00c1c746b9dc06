package stagger_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// benchCitation is a document's citation of a BENCHMARKS.md section:
// `BENCHMARKS.md`, "Section" or `BENCHMARKS.md` ("Section").
var benchCitation = regexp.MustCompile("BENCHMARKS\\.md`?,?\\s\\(?\"([^\"]+)\"")

// benchFigure is a measured figure as the docs quote them: a ratio to
// capacity (1.04x, 1.03-1.06x), a share with a decimal (10.2 %,
// 69.1-72.1 %) or seconds with a decimal (0.40-0.44 s).
var benchFigure = regexp.MustCompile(`\d+\.\d+(?:-\d+\.\d+)?(?:x| ?%| s\b)`)

// TestDocsFiguresMatchBenchmarks: where the README or a document in docs/
// cites a section of BENCHMARKS.md, the section exists, and every figure
// quoted in the sentence that cites it is one that section has. A figure that a later
// measurement replaced in BENCHMARKS.md (the fleet's "at most 1.02x" at
// 40 % load, measured 1.03-1.06x since) then fails here instead of going
// stale in the docs.
func TestDocsFiguresMatchBenchmarks(t *testing.T) {
	bench, err := os.ReadFile("BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := benchSections(string(bench))
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	cited := 0
	for _, path := range append([]string{"README.md"}, docs...) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, block := range strings.Split(string(data), "\n\n") {
			for _, at := range benchCitation.FindAllStringSubmatchIndex(block, -1) {
				cited++
				name := strings.Join(strings.Fields(block[at[2]:at[3]]), " ")
				text, ok := sections[name]
				if !ok {
					t.Errorf("%s cites BENCHMARKS.md's %q, which has no such section", path, name)
					continue
				}
				sentence := block[sentenceStart(block, at[0]):sentenceEnd(block, at[1])]
				for _, f := range benchFigure.FindAllString(sentence, -1) {
					for _, n := range regexp.MustCompile(`\d+\.\d+`).FindAllString(f, -1) {
						if !strings.Contains(text, n) {
							t.Errorf("%s quotes %s from BENCHMARKS.md's %q, which does not have %s", path, f, name, n)
						}
					}
				}
			}
		}
	}
	if cited == 0 {
		t.Error("no document cites a section of BENCHMARKS.md: the check checks nothing")
	}
}

// benchSections maps each heading of BENCHMARKS.md (any level) to its text,
// up to the next heading of the same level or above.
func benchSections(doc string) map[string]string {
	lines := strings.Split(doc, "\n")
	level := func(l string) int {
		if strings.HasPrefix(l, "```") {
			return 0
		}
		n := len(l) - len(strings.TrimLeft(l, "#"))
		if n == 0 || n >= len(l) || l[n] != ' ' {
			return 0
		}
		return n
	}
	out := map[string]string{}
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		n := level(l)
		if fenced || n == 0 {
			continue
		}
		end := len(lines)
		inner := false
		for j := i + 1; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], "```") {
				inner = !inner
			}
			if m := level(lines[j]); !inner && m > 0 && m <= n {
				end = j
				break
			}
		}
		out[strings.TrimSpace(l[n:])] = strings.Join(lines[i+1:end], "\n")
	}
	return out
}

// sentenceStart is where the sentence around offset at begins: after the
// last full stop before it, or at the block's start.
func sentenceStart(block string, at int) int {
	start := 0
	for _, sep := range []string{". ", ".\n"} {
		if i := strings.LastIndex(block[:at], sep); i >= 0 && i+len(sep) > start {
			start = i + len(sep)
		}
	}
	return start
}

// sentenceEnd is where the sentence around offset at ends: at the first
// full stop after it, or at the block's end.
func sentenceEnd(block string, at int) int {
	end := len(block)
	for _, sep := range []string{". ", ".\n"} {
		if i := strings.Index(block[at:], sep); i >= 0 && at+i+1 < end {
			end = at + i + 1
		}
	}
	return end
}
