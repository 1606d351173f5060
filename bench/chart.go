package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var chartColors = []color.Color{
	color.RGBA{R: 0xd6, G: 0x5f, B: 0x5f, A: 0xff},
	color.RGBA{R: 0x3b, G: 0x75, B: 0xaf, A: 0xff},
	color.RGBA{R: 0x55, G: 0xa8, B: 0x68, A: 0xff},
	color.RGBA{R: 0xc4, G: 0x9c, B: 0x3c, A: 0xff},
}

// WriteChart draws the run as one PNG at path: prompt tokens naive, through
// the proxy and ideal per session (top), and the p50 latency each
// configuration adds over direct per overhead cell (bottom). Either part
// may be nil.
func WriteChart(path string, s *Savings, o *Overhead) error {
	var rows [][]*plot.Plot
	if s != nil {
		p, err := savingsPlot(s)
		if err != nil {
			return err
		}
		rows = append(rows, []*plot.Plot{p})
	}
	if o != nil && len(o.Cells) > 0 {
		p, err := latencyPlot(o)
		if err != nil {
			return err
		}
		rows = append(rows, []*plot.Plot{p})
	}
	if len(rows) == 0 {
		return fmt.Errorf("bench: nothing to chart")
	}
	const w, rowH = 30 * vg.Centimeter, 13 * vg.Centimeter
	img := vgimg.New(w, rowH*vg.Length(len(rows)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadY: vg.Centimeter, PadX: vg.Millimeter * 5, PadTop: vg.Millimeter * 5, PadBottom: vg.Millimeter * 5}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating chart: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing chart: %w", err)
	}
	return f.Close()
}

// savingsPlot is a grouped bar chart of prompt tokens per session on a
// log-like scale: bars show log10(tokens) so that the 50-turn session and a
// 4-request control fit one chart; tick labels are plain token counts.
func savingsPlot(s *Savings) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Prompt tokens per session: naive, through the proxy, ideal client (log scale)"
	p.Y.Label.Text = "prompt tokens"
	names := make([]string, len(s.Sessions))
	series := [3]plotter.Values{}
	for i, r := range s.Sessions {
		names[i] = r.Name
		for j, v := range []int{r.Naive.Prompt, r.Proxy.Prompt, r.Ideal.Prompt} {
			series[j] = append(series[j], math.Log10(math.Max(float64(v), 1)))
		}
	}
	w := vg.Points(9)
	for j, label := range []string{"naive", "proxy", "ideal"} {
		b, err := plotter.NewBarChart(series[j], w)
		if err != nil {
			return nil, err
		}
		b.Color = chartColors[j]
		b.LineStyle.Width = 0
		b.Offset = vg.Length(j-1) * w
		p.Add(b)
		p.Legend.Add(label, b)
	}
	p.Legend.Top = true
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 5
	p.X.Tick.Label.XAlign = draw.XRight
	p.Y.Min = 2
	p.Y.Tick.Marker = plot.TickerFunc(func(min, max float64) []plot.Tick {
		var ts []plot.Tick
		for e := math.Floor(min); e <= math.Ceil(max); e++ {
			ts = append(ts, plot.Tick{Value: e, Label: fmt.Sprintf("%.0f", math.Pow(10, e))})
		}
		return ts
	})
	return p, nil
}

// latencyPlot is a grouped bar chart of the p50 latency each configuration
// adds over direct, per cell.
func latencyPlot(o *Overhead) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Added p50 latency over direct to the fake upstream, per cell (size/mode/concurrency)"
	p.Y.Label.Text = "ms"
	var cells []string
	seen := map[string]bool{}
	byTarget := map[string]map[string]float64{}
	var targets []string
	for _, c := range o.Cells {
		key := fmt.Sprintf("%s/%s/c%d", c.Size, c.Mode, c.Concurrency)
		if !seen[key] {
			seen[key] = true
			cells = append(cells, key)
		}
		if c.Target == TargetDirect {
			continue
		}
		if byTarget[c.Target] == nil {
			byTarget[c.Target] = map[string]float64{}
			targets = append(targets, c.Target)
		}
		byTarget[c.Target][key] = float64(c.AddedP50) / float64(time.Millisecond)
	}
	w := vg.Points(7)
	for j, t := range targets {
		vs := make(plotter.Values, len(cells))
		for i, k := range cells {
			vs[i] = byTarget[t][k]
		}
		b, err := plotter.NewBarChart(vs, w)
		if err != nil {
			return nil, err
		}
		b.Color = chartColors[(j+1)%len(chartColors)]
		b.LineStyle.Width = 0
		b.Offset = (vg.Length(j) - vg.Length(len(targets)-1)/2) * w
		p.Add(b)
		p.Legend.Add(t, b)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.NominalX(cells...)
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign = draw.XRight
	return p, nil
}
