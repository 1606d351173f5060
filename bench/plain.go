package bench

import (
	"net/http"
	"net/http/httputil"
	"net/url"
)

// PlainProxy returns the reference the proxy's pass-through is compared
// with: a bare httputil.ReverseProxy to upstream with the same upstream
// pool size as the proxy (proxy.DefaultMaxIdleConnsPerHost).
func PlainProxy(upstream *url.URL) http.Handler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	tr.MaxIdleConns = 512
	return &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(upstream); pr.Out.Host = upstream.Host },
		Transport: tr,
	}
}
