package main

import (
	"image/color"

	"github.com/cockroachdb/errors"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// writePlot draws progress per checkpoint barrier: the truth and both
// approaches' raw figures, in percent.
func writePlot(path string, rep *report) error {
	p := plot.New()
	p.Title.Text = "Backfill progress per checkpoint barrier"
	p.X.Label.Text = "checkpoint barrier"
	p.Y.Label.Text = "progress (%)"
	p.Y.Min, p.Y.Max = 0, 105
	p.Add(plotter.NewGrid())
	series := []struct {
		name  string
		value func(b barrierJSON) float64
		color color.RGBA
		dash  []vg.Length
	}{
		{"truth", func(b barrierJSON) float64 { return b.Truth }, color.RGBA{A: 255}, nil},
		{"row-count (RisingWave)", func(b barrierJSON) float64 { return b.RowCount }, color.RGBA{R: 214, G: 39, B: 40, A: 255}, nil},
		{"stats (lsmstats)", func(b barrierJSON) float64 { return b.Stats }, color.RGBA{G: 119, B: 187, A: 255}, []vg.Length{vg.Points(4), vg.Points(3)}},
	}
	for _, s := range series {
		pts := make(plotter.XYs, len(rep.Barriers))
		for i, b := range rep.Barriers {
			pts[i].X, pts[i].Y = float64(b.Barrier), s.value(b)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return errors.Wrap(err, "plot")
		}
		l.Color = s.color
		l.Width = vg.Points(1.5)
		l.Dashes = s.dash
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}
