package proxy

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gemini-proxy/gemini-proxy/metrics"
)

// maxChildren bounds the children one childCache remembers; past it,
// lookups go to the vector every time (label values come from closed
// sets, so this is a safety net, not a working limit).
const maxChildren = 4096

// childCache remembers the children of one metric vector by their label
// values, so that each request skips client_golang's label validation and
// hashing. A child is created by WithLabelValues on first use, exactly as
// before, so no series appears earlier than it used to; vectors never
// delete children here, so a remembered child stays the exported one.
// Safe for concurrent use; the zero value is ready to use.
//
// The map is copied on write and read through an atomic pointer: a
// lookup writes no shared memory, where an RWMutex's read lock is an
// atomic add on a word every core shares, a dozen times a request
// (issue 17 item 4). Children are few and made once.
type childCache[K comparable, M any] struct {
	mu sync.Mutex // serialises writers
	m  atomic.Pointer[map[K]M]
}

// get returns the child for k, calling child to create it on first use.
func (c *childCache[K, M]) get(k K, child func() M) M {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	v := child()
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[K]M
	if p := c.m.Load(); p != nil {
		old = *p
	}
	if len(old) >= maxChildren {
		return v
	}
	m := make(map[K]M, len(old)+1)
	maps.Copy(m, old)
	m[k] = v
	c.m.Store(&m)
	return v
}

type (
	requestLabels struct {
		route  Route
		model  string
		code   int
		stream bool
	}
	routeCode struct {
		route Route
		code  int
	}
	labelPair struct{ a, b string }
)

// hotMetrics are the per-request metrics of the Handler behind childCaches.
type hotMetrics struct {
	m *metrics.Metrics

	requests          childCache[requestLabels, prometheus.Counter]
	routes            childCache[Route, *routeHot]
	clients           childCache[SDK, prometheus.Counter]
	rewrites          childCache[labelPair, prometheus.Counter]
	upstreamResponses childCache[routeCode, prometheus.Counter]
	usage             childCache[labelPair, prometheus.Counter]
	rwBytes           childCache[string, prometheus.Counter]
}

func (h *hotMetrics) rewriteBytes(stage string) prometheus.Counter {
	return h.rwBytes.get(stage, func() prometheus.Counter { return h.m.RewriteBytes.WithLabelValues(stage) })
}

func (h *hotMetrics) request(route Route, model string, code int, stream bool) prometheus.Counter {
	return h.requests.get(requestLabels{route, model, code, stream}, func() prometheus.Counter {
		return h.m.Requests.WithLabelValues(string(route), model, strconv.Itoa(code), strconv.FormatBool(stream))
	})
}

// forRoute returns the children of route's per-route metrics: finish
// looks them up once a request instead of once per metric (seven map
// lookups of a string key, issue 17 item 4).
func (h *hotMetrics) forRoute(route Route) *routeHot {
	return h.routes.get(route, func() *routeHot { return &routeHot{route: route, m: h.m} })
}

func (h *hotMetrics) requestDuration(route Route, stream bool) prometheus.Observer {
	return h.forRoute(route).requestDuration(stream)
}

func (h *hotMetrics) requestBytes(route Route, stage string) prometheus.Counter {
	return h.forRoute(route).requestBytes(stage)
}

// routeHot holds the children of one route's per-route metrics. Each is
// made by WithLabelValues on its first use, as with childCache, so no
// series appears earlier than it used to; two routeHots of one route
// (childCache.get racing) hold the same children, the vector's. Safe for
// concurrent use.
type routeHot struct {
	route Route
	m     *metrics.Metrics

	duration                      [2]lazyChild[prometheus.Observer] // by stream
	overhead, upstream, firstByte lazyChild[prometheus.Observer]
	received, sent, responseBytes lazyChild[prometheus.Counter]
}

// lazyChild is one metric child, made on first use. The zero value is
// ready to use.
type lazyChild[M any] struct{ p atomic.Pointer[M] }

func (l *lazyChild[M]) get(child func() M) M {
	if p := l.p.Load(); p != nil {
		return *p
	}
	v := child()
	l.p.CompareAndSwap(nil, &v)
	return *l.p.Load()
}

func (r *routeHot) requestDuration(stream bool) prometheus.Observer {
	i := 0
	if stream {
		i = 1
	}
	return r.duration[i].get(func() prometheus.Observer {
		return r.m.RequestDuration.WithLabelValues(string(r.route), strconv.FormatBool(stream))
	})
}

func (r *routeHot) proxyOverhead() prometheus.Observer {
	return r.overhead.get(func() prometheus.Observer { return r.m.ProxyOverhead.WithLabelValues(string(r.route)) })
}

func (r *routeHot) upstreamDuration() prometheus.Observer {
	return r.upstream.get(func() prometheus.Observer { return r.m.UpstreamDuration.WithLabelValues(string(r.route)) })
}

func (r *routeHot) timeToFirstByte() prometheus.Observer {
	return r.firstByte.get(func() prometheus.Observer { return r.m.TimeToFirstByte.WithLabelValues(string(r.route)) })
}

func (r *routeHot) requestBytes(stage string) prometheus.Counter {
	c := &r.received
	if stage == metrics.StageSent {
		c = &r.sent
	}
	return c.get(func() prometheus.Counter { return r.m.RequestBytes.WithLabelValues(string(r.route), stage) })
}

func (r *routeHot) responseBytesOf() prometheus.Counter {
	return r.responseBytes.get(func() prometheus.Counter { return r.m.ResponseBytes.WithLabelValues(string(r.route)) })
}

func (h *hotMetrics) client(sdk SDK) prometheus.Counter {
	return h.clients.get(sdk, func() prometheus.Counter {
		return h.m.ClientRequests.WithLabelValues(string(sdk), strconv.FormatBool(sdk.Deprecated()))
	})
}

func (h *hotMetrics) rewrite(mode, outcome string) prometheus.Counter {
	return h.rewrites.get(labelPair{mode, outcome}, func() prometheus.Counter {
		return h.m.RewriteRequests.WithLabelValues(mode, outcome)
	})
}

func (h *hotMetrics) upstreamResponse(route Route, code int) prometheus.Counter {
	return h.upstreamResponses.get(routeCode{route, code}, func() prometheus.Counter {
		return h.m.UpstreamResponses.WithLabelValues(string(route), statusLabel(code))
	})
}

func (h *hotMetrics) usageTokens(model, kind string) prometheus.Counter {
	return h.usage.get(labelPair{model, kind}, func() prometheus.Counter {
		return h.m.UsageTokens.WithLabelValues(model, kind)
	})
}
