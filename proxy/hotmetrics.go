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
	routeStream struct {
		route  Route
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
	duration          childCache[routeStream, prometheus.Observer]
	overhead          childCache[Route, prometheus.Observer]
	upstream          childCache[Route, prometheus.Observer]
	firstByte         childCache[Route, prometheus.Observer]
	received, sent    childCache[Route, prometheus.Counter]
	responseBytes     childCache[Route, prometheus.Counter]
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

func (h *hotMetrics) requestDuration(route Route, stream bool) prometheus.Observer {
	return h.duration.get(routeStream{route, stream}, func() prometheus.Observer {
		return h.m.RequestDuration.WithLabelValues(string(route), strconv.FormatBool(stream))
	})
}

func (h *hotMetrics) proxyOverhead(route Route) prometheus.Observer {
	return h.overhead.get(route, func() prometheus.Observer { return h.m.ProxyOverhead.WithLabelValues(string(route)) })
}

func (h *hotMetrics) upstreamDuration(route Route) prometheus.Observer {
	return h.upstream.get(route, func() prometheus.Observer { return h.m.UpstreamDuration.WithLabelValues(string(route)) })
}

func (h *hotMetrics) timeToFirstByte(route Route) prometheus.Observer {
	return h.firstByte.get(route, func() prometheus.Observer { return h.m.TimeToFirstByte.WithLabelValues(string(route)) })
}

func (h *hotMetrics) requestBytes(route Route, stage string) prometheus.Counter {
	c := &h.received
	if stage == metrics.StageSent {
		c = &h.sent
	}
	return c.get(route, func() prometheus.Counter { return h.m.RequestBytes.WithLabelValues(string(route), stage) })
}

func (h *hotMetrics) responseBytesOf(route Route) prometheus.Counter {
	return h.responseBytes.get(route, func() prometheus.Counter { return h.m.ResponseBytes.WithLabelValues(string(route)) })
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
