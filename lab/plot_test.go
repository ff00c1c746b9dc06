//go:build go1.25

package lab

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
)

// svgTexts parses an SVG document and returns its text, one string per
// text element; it fails the test when the document is not XML.
func svgTexts(t *testing.T, doc []byte) []string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	var texts []string
	inText, root := 0, ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the picture is not XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
			if tok.Name.Local == "text" {
				inText++
				texts = append(texts, "")
			}
		case xml.EndElement:
			if tok.Name.Local == "text" {
				inText--
			}
		case xml.CharData:
			if inText > 0 {
				texts[len(texts)-1] += string(tok)
			}
		}
	}
	if root != "svg" {
		t.Fatalf("the picture's root element is %q, want svg", root)
	}
	return texts
}

func TestWritePlot(t *testing.T) {
	cfg := tinyMetastable()
	cfg.Contenders = []string{"stagger-nobudget", "no-retry"}
	var rep *Report
	synctest.Test(t, func(t *testing.T) {
		var err error
		if rep, err = Run(context.Background(), cfg); err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
	var buf bytes.Buffer
	if err := WritePlot(&buf, rep); err != nil {
		t.Fatalf("WritePlot: %v", err)
	}
	texts := strings.Join(svgTexts(t, buf.Bytes()), "\n")
	for _, want := range []string{"scenario metastable", "server capacity", "outage (UNAVAILABLE)",
		"stagger-nobudget attempts", "stagger-nobudget successes", "no-retry attempts", "no-retry successes"} {
		if !strings.Contains(texts, want) {
			t.Errorf("the picture lacks %q; its texts:\n%s", want, texts)
		}
	}
}
