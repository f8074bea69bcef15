package main

import (
	"image/color"
	"os"

	"github.com/cockroachdb/errors"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writePlot draws two panels per checkpoint barrier: progress (the truth
// and both approaches' raw figures, in percent) and, below it, the ETA and
// its interval against the time that actually remained.
func writePlot(path string, rep *report) error {
	top, err := progressPlot(rep)
	if err != nil {
		return err
	}
	bottom, err := etaPlot(rep)
	if err != nil {
		return err
	}
	img := vgimg.New(9*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	plots := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(plots, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(8)}, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return errors.Wrap(err, "plot")
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return errors.Wrap(err, "plot")
	}
	return errors.Wrap(f.Close(), "plot")
}

// etaPlot draws the ETA, its interval and the actual remaining time, in
// seconds, at each checkpoint that showed an ETA.
func etaPlot(rep *report) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "ETA against the time that actually remained"
	p.X.Label.Text = "checkpoint barrier"
	p.Y.Label.Text = "seconds remaining"
	p.Add(plotter.NewGrid())
	series := []struct {
		name  string
		value func(b barrierJSON) float64
		color color.RGBA
		dash  []vg.Length
	}{
		{"actual", func(b barrierJSON) float64 { return b.ActualRemainingS }, color.RGBA{A: 255}, nil},
		{"ETA", func(b barrierJSON) float64 { return b.ETA.RemainingS }, color.RGBA{G: 119, B: 187, A: 255}, nil},
		{"interval", func(b barrierJSON) float64 { return b.ETA.LowS }, color.RGBA{G: 119, B: 187, A: 120}, []vg.Length{vg.Points(2), vg.Points(2)}},
		{"", func(b barrierJSON) float64 { return b.ETA.HighS }, color.RGBA{G: 119, B: 187, A: 120}, []vg.Length{vg.Points(2), vg.Points(2)}},
	}
	// The largest actual time bounds the axis: an ETA far off is clipped.
	var ymax float64
	for _, b := range rep.Barriers {
		ymax = max(ymax, b.ActualRemainingS)
	}
	p.Y.Min, p.Y.Max = 0, 1.5*max(ymax, 1)
	for _, s := range series {
		var pts plotter.XYs
		for _, b := range rep.Barriers {
			if b.ETA.RemainingS < 0 || b.Finished {
				continue
			}
			pts = append(pts, plotter.XY{X: float64(b.Barrier), Y: min(s.value(b), p.Y.Max)})
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, errors.Wrap(err, "plot")
		}
		l.Color, l.Width, l.Dashes = s.color, vg.Points(1.5), s.dash
		p.Add(l)
		if s.name != "" {
			p.Legend.Add(s.name, l)
		}
	}
	p.Legend.Top = true
	return p, nil
}

// progressPlot draws the truth and both approaches' raw figures, in
// percent.
func progressPlot(rep *report) (*plot.Plot, error) {
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
		{"truth", func(b barrierJSON) float64 { return truthValue(b.Truth) }, color.RGBA{A: 255}, nil},
		{"row-count (RisingWave)", func(b barrierJSON) float64 { return b.RowCount }, color.RGBA{R: 214, G: 39, B: 40, A: 255}, nil},
		{"stats (lsmstats)", func(b barrierJSON) float64 { return b.Stats }, color.RGBA{G: 119, B: 187, A: 255}, []vg.Length{vg.Points(4), vg.Points(3)}},
	}
	for _, s := range series {
		pts := make(plotter.XYs, 0, len(rep.Barriers))
		for _, b := range rep.Barriers {
			if y := s.value(b); y >= 0 { // a truth absent is no point
				pts = append(pts, plotter.XY{X: float64(b.Barrier), Y: y})
			}
		}
		if len(pts) == 0 {
			continue // --no-truth: no truth line
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, errors.Wrap(err, "plot")
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
	return p, nil
}
