package savingspage

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// pageView is the template's data: figures formatted, charts laid out.
type pageView struct {
	Now, Uptime     string
	LastHourLabel   string
	Rows            []figureRow
	Models, Rules   []savedRow
	Recent          []recentRow
	ConvTitle       string
	ConvChart       *chart
	RecentChart     *chart
	NaiveTotal      int
	ProxiedTotal    int
	ConvSavedShare  string
	HasRecentChange bool
}

// figureRow is one line of the summary: its id names the figure for tests
// (data-total and data-hour carry the raw numbers).
type figureRow struct {
	ID, Label             string
	Total, Hour           string
	TotalValue, HourValue float64
}

type savedRow struct {
	Name                            string
	Requests, Tokens, Dollars, Hour string
	TokensValue, DollarsValue       float64
}

type recentRow struct {
	At, Model, Status, Header string
}

// chart is a grouped bar chart in SVG user units.
type chart struct {
	Width, Height, Base int
	Max                 string
	Groups              []barGroup
	LabelA, LabelB      string
}

type barGroup struct {
	X, LabelX int
	Label     string
	A, B      bar
}

type bar struct {
	X, Y, W, H int
	Title      string
}

func view(f Figures) pageView {
	v := pageView{
		Now:       f.Now.UTC().Format(time.DateTime + " UTC"),
		Uptime:    f.Now.Sub(f.Start).Round(time.Second).String(),
		ConvTitle: f.ConvTitle,
	}
	v.LastHourLabel = "last hour"
	if !f.LastHourFull {
		v.LastHourLabel = "last hour (= since start)"
	}
	t, h := f.Total, f.LastHour
	row := func(id, label string, total, hour float64, format func(float64) string) {
		v.Rows = append(v.Rows, figureRow{ID: id, Label: label, Total: format(total), Hour: format(hour), TotalValue: total, HourValue: hour})
	}
	row("requests", "generate requests", t.Requests, h.Requests, count)
	row("rewritten", "rewritten by the proxy", t.Rewritten, h.Rewritten, count)
	row("tokens", "prompt tokens saved (estimate)", t.Tokens, h.Tokens, count)
	row("dollars", "net dollars saved (ledger: saved − cost increases)", t.Saved-t.CostIncrease, h.Saved-h.CostIncrease, dollars)
	row("cost-increase", "dollars of requests the proxy made dearer", t.CostIncrease, h.CostIncrease, dollars)
	row("bytes", "request bytes removed", t.Bytes, h.Bytes, count)
	row("cached-share", "prompt tokens the upstream served from its cache", share(t.CachedTokens, t.PromptTokens), share(h.CachedTokens, h.PromptTokens), percent)
	for _, area := range sortedKeys(t.CacheLookups) {
		row("cache-hit-share-"+area, "proxy cache hit share ("+area+")", share(t.CacheHits[area], t.CacheLookups[area]), share(h.CacheHits[area], h.CacheLookups[area]), percent)
	}
	for _, m := range sortedKeys(t.ByModel) {
		s := t.ByModel[m]
		v.Models = append(v.Models, savedRow{Name: m, Requests: count(s.Requests), Tokens: count(s.Tokens), Dollars: dollars(s.Dollars),
			Hour: count(h.ByModel[m].Tokens), TokensValue: s.Tokens, DollarsValue: s.Dollars})
	}
	for _, r := range sortedKeys(t.ByRule) {
		s := t.ByRule[r]
		v.Rules = append(v.Rules, savedRow{Name: r, Tokens: count(s.Tokens), Hour: count(h.ByRule[r].Tokens), TokensValue: s.Tokens})
	}
	for _, r := range f.Recent {
		v.Recent = append(v.Recent, recentRow{At: r.At.UTC().Format(time.TimeOnly), Model: r.Model, Status: strconv.Itoa(r.Status), Header: r.Header})
	}
	if len(f.Conv) > 0 {
		a, b := make([]int, len(f.Conv)), make([]int, len(f.Conv))
		for i, t := range f.Conv {
			a[i], b[i] = t.Naive, t.Proxied
			v.NaiveTotal += t.Naive
			v.ProxiedTotal += t.Proxied
		}
		v.ConvChart = layout(a, b, "naive client", "through the proxy", "prompt tokens", func(i int) string { return "turn " + strconv.Itoa(i+1) })
		v.ConvSavedShare = percent(share(float64(v.NaiveTotal-v.ProxiedTotal), float64(v.NaiveTotal)))
	}
	if n := len(f.Recent); n > 0 {
		a, b := make([]int, n), make([]int, n)
		for i := range n {
			r := f.Recent[n-1-i] // oldest left
			a[i], b[i] = r.BytesBefore, r.BytesAfter
		}
		v.RecentChart = layout(a, b, "sent by the client", "sent upstream", "bytes", func(i int) string { return "#" + strconv.Itoa(i+1) })
	}
	return v
}

// layout places pairs of bars a[i], b[i] side by side, scaled to the
// largest value.
func layout(a, b []int, labelA, labelB, unit string, name func(int) string) *chart {
	const width, height, top, bottom, left = 640, 220, 10, 30, 10
	c := &chart{Width: width, Height: height, Base: height - bottom, LabelA: labelA, LabelB: labelB}
	maxV := 1
	for i := range a {
		maxV = max(maxV, a[i], b[i])
	}
	c.Max = count(float64(maxV)) + " " + unit
	group := (width - 2*left) / len(a)
	barW := max(1, group*2/5)
	scale := func(x int) int { return int(float64(x) / float64(maxV) * float64(height-top-bottom)) }
	for i := range a {
		x := left + i*group
		ha, hb := scale(a[i]), scale(b[i])
		c.Groups = append(c.Groups, barGroup{
			X: x, LabelX: x + group/2, Label: name(i),
			A: bar{X: x + group/10, Y: c.Base - ha, W: barW, H: ha, Title: fmt.Sprintf("%s, %s: %s %s", name(i), labelA, count(float64(a[i])), unit)},
			B: bar{X: x + group/10 + barW, Y: c.Base - hb, W: barW, H: hb, Title: fmt.Sprintf("%s, %s: %s %s", name(i), labelB, count(float64(b[i])), unit)},
		})
	}
	return c
}

func share(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return part / whole
}

// count formats a whole number with thousands separators.
func count(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func dollars(x float64) string { return fmt.Sprintf("$%.4f", x) }

func percent(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }
