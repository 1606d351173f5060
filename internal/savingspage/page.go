package savingspage

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Ring sizes: the page never holds more than this.
const (
	// DefaultRecent is how many recent reports the page lists.
	DefaultRecent = 20
	// minutes of per-minute snapshots kept: one hour and one spare, so
	// that a snapshot at least an hour old is always at hand.
	keepSnapshots = 62
	// maxTurns bounds the conversation chart.
	maxTurns = 50
)

// Options configure a Page.
type Options struct {
	// Gatherer is the proxy's own registry, read at every page view and
	// every minute.
	Gatherer prometheus.Gatherer
	// Recent is how many recent reports to keep (default DefaultRecent).
	Recent int
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

// Report is one generate exchange as the page lists it: never any
// content, only the X-Gemini-Proxy-Report value and request facts.
type Report struct {
	At     time.Time
	Model  string
	Status int
	// Header is the X-Gemini-Proxy-Report value ("bytes=A->B; rule=N").
	Header string
	// BytesBefore and BytesAfter are the request body's size before and
	// after the rewrite.
	BytesBefore, BytesAfter int
}

// Turn is one turn of the chart of a conversation: prompt tokens a naive
// client pays for it directly and through the proxy.
type Turn struct {
	Naive, Proxied int
}

// Page is the savings page: an http.Handler for GET / on the admin
// listener. It is safe for concurrent use.
type Page struct {
	g      prometheus.Gatherer
	now    func() time.Time
	recent int
	start  time.Time

	mu        sync.Mutex
	reports   []Report // ring, oldest first once full
	next      int      // where the next report goes once full
	snapshots []snapshot
	convTitle string
	conv      []Turn
}

type snapshot struct {
	at time.Time
	t  Totals
}

// New returns a page reading o.Gatherer.
func New(o Options) *Page {
	if o.Recent <= 0 {
		o.Recent = DefaultRecent
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Page{g: o.Gatherer, now: o.Now, recent: o.Recent, start: o.Now()}
}

// Record adds a generate exchange to the recent reports, dropping the
// oldest beyond the bound.
func (p *Page) Record(r Report) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.reports) < p.recent {
		p.reports = append(p.reports, r)
		return
	}
	p.reports[p.next] = r
	p.next = (p.next + 1) % p.recent
}

// SetConversation sets the per-turn chart (the demo's scripted
// conversation); at most 50 turns are kept.
func (p *Page) SetConversation(title string, turns []Turn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.convTitle = title
	p.conv = append([]Turn(nil), turns[:min(len(turns), maxTurns)]...)
}

// Tick takes the per-minute snapshot that the last-hour figures are
// computed from. Run calls it every minute.
func (p *Page) Tick() error {
	t, err := read(p.g)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.snapshots = append(p.snapshots, snapshot{at: p.now(), t: t})
	if n := len(p.snapshots); n > keepSnapshots {
		p.snapshots = append(p.snapshots[:0], p.snapshots[n-keepSnapshots:]...)
	}
	return nil
}

// Run calls Tick every minute until ctx is done.
func (p *Page) Run(ctx context.Context) {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			p.Tick() //nolint:errcheck // the next view reports a failing registry
		}
	}
}

// Figures is what the page shows, computed from the registry and the rings.
type Figures struct {
	Now, Start time.Time
	// Total is since the process started; LastHour since the newest
	// snapshot at least an hour old (since start while the process is
	// younger than an hour).
	Total, LastHour Totals
	// LastHourFull reports whether LastHour spans a full hour.
	LastHourFull bool
	Recent       []Report // newest first
	ConvTitle    string
	Conv         []Turn
}

// Figures reads the registry now.
func (p *Page) Figures() (Figures, error) {
	t, err := read(p.g)
	if err != nil {
		return Figures{}, err
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := Figures{Now: now, Start: p.start, Total: t, LastHour: t, ConvTitle: p.convTitle, Conv: append([]Turn(nil), p.conv...)}
	for i := len(p.snapshots) - 1; i >= 0; i-- {
		if s := p.snapshots[i]; !s.at.After(now.Add(-time.Hour)) {
			f.LastHour, f.LastHourFull = t.minus(s.t), true
			break
		}
	}
	for i := range p.reports {
		// Newest first: the ring's newest is just before next.
		j := (p.next - 1 - i + 2*len(p.reports)) % len(p.reports)
		f.Recent = append(f.Recent, p.reports[j])
	}
	return f, nil
}

// ServeHTTP renders the page.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, err := p.Figures()
	if err != nil {
		http.Error(w, fmt.Sprintf("reading metrics: %v", err), http.StatusInternalServerError)
		return
	}
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, view(f)); err != nil {
		http.Error(w, fmt.Sprintf("rendering the page: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Write(b.Bytes()) //nolint:errcheck
}

var pageTemplate = template.Must(template.New("page").Parse(pageHTML))
