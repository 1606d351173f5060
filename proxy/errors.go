package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gemini-proxy/gemini-proxy/metrics"
)

// StatusClientClosedRequest is the non-standard status (nginx's 499) the
// proxy records in metrics and logs when the client went away. It is never
// written to a client.
const StatusClientClosedRequest = 499

// errBodyTooLarge is the error for a request body above Options.MaxBodyBytes.
var errBodyTooLarge = errors.New("request body too large")

// errDotSegment answers a request whose path has a "." or ".." segment,
// plain or percent-encoded (issue 16 item 3).
var errDotSegment = proxyError{code: http.StatusBadRequest, status: "INVALID_ARGUMENT", message: "The request path has a dot segment."}

// errBodyIdle answers a client whose request body stalled for longer than
// Options.BodyIdleTimeout.
var errBodyIdle = proxyError{code: http.StatusRequestTimeout, status: "DEADLINE_EXCEEDED", message: "The client did not send the request body in time."}

// errBudgetSpent is the error for a chunked request body that the
// process-wide memory budget cannot hold (Options.MemoryBudgetBytes): 503,
// and nothing reaches the upstream.
var errBudgetSpent = errors.New("memory budget spent")

// errReadBody wraps a failure to read the client's request body.
var errReadBody = errors.New("reading request body")

// proxyError is the outcome of an error the proxy itself caused.
type proxyError struct {
	code    int    // HTTP status code; StatusClientClosedRequest when the client is gone
	status  string // Google RPC status name
	message string // constant text: never a credential, URL or raw error string
	kind    string // metrics.Upstream* kind, "" when the upstream is not at fault
}

// statusError classifies err, the reason the proxy could not answer r, into
// a status (modelled on Caddy's reverseproxy statusError). It is the one
// place that maps errors to HTTP statuses:
//
//	body over Options.MaxBodyBytes        413 (no Google status: the API sends none)
//	body stalled (Options.BodyIdleTimeout) 408 DEADLINE_EXCEEDED (decided in Handler.fail)
//	client gone                           499, metrics and log only
//	upstream response header timeout      504 DEADLINE_EXCEEDED
//	upstream unreachable, TLS, other      502 UNAVAILABLE
func statusError(ctx context.Context, err error) proxyError {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, errBodyTooLarge) || errors.As(err, &mbe):
		return proxyError{code: http.StatusRequestEntityTooLarge, status: "INVALID_ARGUMENT", message: "Request payload size exceeds the limit of the proxy."}
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled):
		return proxyError{code: StatusClientClosedRequest, status: "CANCELLED", message: "The client closed the request."}
	case errors.Is(err, errBudgetSpent):
		return proxyError{code: http.StatusServiceUnavailable, status: "UNAVAILABLE", message: "The proxy has no memory left to buffer the request body; retry later."}
	case errors.Is(err, errReadBody):
		return proxyError{code: http.StatusBadRequest, status: "INVALID_ARGUMENT", message: "The proxy could not read the request body."}
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return proxyError{code: http.StatusGatewayTimeout, status: "DEADLINE_EXCEEDED", message: "The upstream did not answer in time.", kind: metrics.UpstreamTimeout}
	}
	var (
		recErr  tls.RecordHeaderError
		certErr *tls.CertificateVerificationError
		uaErr   x509.UnknownAuthorityError
		hostErr x509.HostnameError
		alert   tls.AlertError
	)
	if errors.As(err, &recErr) || errors.As(err, &certErr) || errors.As(err, &uaErr) || errors.As(err, &hostErr) || errors.As(err, &alert) {
		return proxyError{code: http.StatusBadGateway, status: "UNAVAILABLE", message: "The proxy could not establish a secure connection to the upstream.", kind: metrics.UpstreamTLS}
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) || (errors.As(err, &opErr) && opErr.Op == "dial") {
		return proxyError{code: http.StatusBadGateway, status: "UNAVAILABLE", message: "The upstream is unreachable.", kind: metrics.UpstreamUnreachable}
	}
	return proxyError{code: http.StatusBadGateway, status: "UNAVAILABLE", message: "The upstream connection failed.", kind: metrics.UpstreamOther}
}

// writeError writes pe as a Gemini-shaped JSON error. Nothing is written
// for a client that has gone away.
func writeError(w http.ResponseWriter, pe proxyError) {
	if pe.code == StatusClientClosedRequest {
		return
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"code": pe.code, "message": pe.message, "status": pe.status,
	}})
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=UTF-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(pe.code)
	w.Write(body) //nolint:errcheck // the client may be gone; nothing to do
}

// safeError strips the request URL (which may carry ?key=) from a transport
// error before it is logged.
func safeError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
