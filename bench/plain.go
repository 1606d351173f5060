package bench

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
)

// PlainProxy returns the reference the proxy's pass-through is compared
// with: a bare httputil.ReverseProxy to upstream with the same upstream
// pool size as the proxy (proxy.DefaultMaxIdleConnsPerHost) and, like the
// proxy, a pool of 32 KiB copy buffers: without one, httputil allocates a
// buffer per response, and the comparison would flatter the proxy (issue 17
// calls this the fair baseline).
func PlainProxy(upstream *url.URL) http.Handler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	tr.MaxIdleConns = 512
	return &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(upstream); pr.Out.Host = upstream.Host },
		Transport:  tr,
		BufferPool: plainBuffers{},
	}
}

// plainBuffers is the plain proxy's httputil.BufferPool.
type plainBuffers struct{}

var plainPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (plainBuffers) Get() []byte  { return *plainPool.Get().(*[]byte) }
func (plainBuffers) Put(b []byte) { plainPool.Put(&b) }
