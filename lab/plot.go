package lab

import (
	"fmt"
	"image/color"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotColors tells the contenders apart in a plot: as many as the largest
// list of contenders has, each far enough from the others to read.
var plotColors = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
	{0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff}, {0x00, 0x00, 0x00, 0xff}, {0x39, 0x3b, 0x79, 0xff},
}

// WritePlot draws rep as an SVG picture to w: per contender, the attempts
// its connections began (dashed) and the calls that returned successfully
// (solid) in each second of the run (Result.Timeline), the server's
// capacity (Config.CapacityAt, where the server limits its attempts), and
// the trigger (OutageStart to OutageEnd) shaded. A contender whose
// attempts climb far above the capacity while its successes stay low is
// in a retry storm; one whose successes fall and never come back after the
// trigger is in a metastable failure.
func WritePlot(w io.Writer, rep *Report) error { return writePlot(w, rep, "svg") }

// writePlot draws rep in format (one of gonum.org/v1/plot's: svg, png, ...).
func writePlot(w io.Writer, rep *Report, format string) error {
	cfg := rep.Config
	p := plot.New()
	p.Title.Text = fmt.Sprintf("stagger lab, scenario %s: attempts (dashed) and successes (solid) per second", cfg.Scenario)
	p.X.Label.Text = "seconds from the start of the load"
	p.Y.Label.Text = "per second"
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.XOffs = vg.Points(-4)

	top := 0.0
	seconds := 0
	for _, r := range rep.Results {
		seconds = max(seconds, len(r.Timeline))
		for _, s := range r.Timeline {
			top = max(top, float64(s.Attempts), float64(s.Successes))
		}
	}
	var capacity plotter.XYs
	if !math.IsInf(cfg.CapacityAt(0), 1) {
		for t := 0 * Bin; t <= cfg.Duration; t += Bin {
			c := cfg.CapacityAt(t)
			capacity = append(capacity, plotter.XY{X: t.Seconds(), Y: c})
			top = max(top, c)
		}
	}
	top = math.Max(top*1.05, 1)

	if cfg.Scenario.HasTrigger() {
		from, to := cfg.OutageStart.Seconds(), cfg.OutageEnd.Seconds()
		shade, err := plotter.NewPolygon(plotter.XYs{{X: from, Y: 0}, {X: to, Y: 0}, {X: to, Y: top}, {X: from, Y: top}})
		if err != nil {
			return fmt.Errorf("lab: plot: %w", err)
		}
		shade.Color = color.RGBA{0xe8, 0xe8, 0xe8, 0xff}
		shade.LineStyle.Width = 0
		p.Add(shade)
		p.Legend.Add(triggerName(cfg.Scenario), shade)
	}
	if capacity != nil {
		l, err := plotter.NewLine(capacity)
		if err != nil {
			return fmt.Errorf("lab: plot: %w", err)
		}
		l.Color = color.Black
		l.Width = vg.Points(2.5)
		p.Add(l)
		p.Legend.Add("server capacity", l)
	}
	for i, r := range rep.Results {
		c := plotColors[i%len(plotColors)]
		attempts, successes := make(plotter.XYs, len(r.Timeline)), make(plotter.XYs, len(r.Timeline))
		for j, s := range r.Timeline {
			x := float64(j) + 0.5 // the middle of the second
			attempts[j] = plotter.XY{X: x, Y: float64(s.Attempts)}
			successes[j] = plotter.XY{X: x, Y: float64(s.Successes)}
		}
		la, err := plotter.NewLine(attempts)
		if err != nil {
			return fmt.Errorf("lab: plot: %w", err)
		}
		la.Color, la.Width, la.Dashes = c, vg.Points(1), []vg.Length{vg.Points(4), vg.Points(3)}
		ls, err := plotter.NewLine(successes)
		if err != nil {
			return fmt.Errorf("lab: plot: %w", err)
		}
		ls.Color, ls.Width = c, vg.Points(1.8)
		p.Add(la, ls)
		p.Legend.Add(r.Contender+" attempts", la)
		p.Legend.Add(r.Contender+" successes", ls)
	}
	p.X.Min, p.X.Max = 0, math.Max(float64(seconds), cfg.Duration.Seconds())
	p.Y.Min, p.Y.Max = 0, top
	// Room on the right for the legend.
	p.X.Max *= 1.35
	p.Legend.ThumbnailWidth = vg.Points(24)
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.Padding = vg.Points(1)
	p.Add(plotter.NewGrid())
	wt, err := p.WriterTo(11*vg.Inch, 6.5*vg.Inch, format)
	if err != nil {
		return fmt.Errorf("lab: plot: %w", err)
	}
	_, err = wt.WriteTo(w)
	return err
}

// triggerName is the legend of the shaded trigger.
func triggerName(s Scenario) string {
	switch {
	case s.overloaded():
		return "overload (half the workers)"
	case s.slowed():
		return "slowdown"
	case s == ScenarioRefused || s == ScenarioRefusedWait:
		return "outage (server gone)"
	case s == ScenarioChain:
		return "C's outage"
	}
	return "outage (UNAVAILABLE)"
}
