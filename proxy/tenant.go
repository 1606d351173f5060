package proxy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// tenantOf returns the tenant id of r: the hex HMAC-SHA256, under secret,
// of the trusted tenant header's value when header is set and present, else
// of the caller's credential (x-goog-api-key, else the key query parameter,
// else an Authorization bearer token). The credential kinds are domain
// separated so that a header value can never collide with a key. Callers
// without any credential share the anonymous tenant.
func tenantOf(secret []byte, header string, r *http.Request) string {
	return tenantID(secret, credential(header, r))
}

// credential returns the kind ("header:", "key:", "bearer:" or
// "anonymous:") and value tenantOf hashes for r.
func credential(header string, r *http.Request) tenantKey {
	if header != "" {
		if v := r.Header.Get(header); v != "" {
			return tenantKey{"header:", v}
		}
	}
	if v := headerValue(r.Header, hdrAPIKey); v != "" {
		return tenantKey{"key:", v}
	}
	if v := queryKey(r.URL.RawQuery); v != "" {
		return tenantKey{"key:", v}
	}
	if v := bearer(headerValue(r.Header, hdrAuthorization)); v != "" {
		return tenantKey{"bearer:", v}
	}
	if v := queryParam(r.URL.RawQuery, "access_token"); v != "" {
		// Google APIs also take an OAuth token in the query; such callers
		// must not share the anonymous tenant.
		return tenantKey{"bearer:", v}
	}
	return tenantKey{"anonymous:", ""}
}

// tenantKey is a credential kind and value.
type tenantKey struct{ kind, value string }

// tenantID is the hex HMAC-SHA256 under secret of the kind and value.
func tenantID(secret []byte, k tenantKey) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(k.kind))
	mac.Write([]byte(k.value))
	var sum [sha256.Size]byte
	return hex.EncodeToString(mac.Sum(sum[:0]))
}

// tenantHasher computes tenant ids without paying for HMAC's key
// schedule on every request: it pools keyed HMAC states and resets them
// (hmac's Reset restores the keyed state). Unlike a cache of ids, it keeps
// no credential beyond the request that carried it. Safe for concurrent
// use; the zero value is not: use newTenantHasher.
type tenantHasher struct {
	secret []byte
	pool   sync.Pool // of *tenantMAC, HMAC-SHA256 keyed with secret
}

func newTenantHasher(secret []byte) *tenantHasher {
	t := &tenantHasher{secret: secret}
	t.pool.New = func() any { return &tenantMAC{mac: hmac.New(sha256.New, t.secret)} }
	return t
}

// tenantMAC is a pooled keyed HMAC state with the scratch its input and
// output pass through: converting the credential to []byte for the
// interface's Write, or hex-encoding into a fresh slice, allocated three
// times a request.
type tenantMAC struct {
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
	hex [2 * sha256.Size]byte
}

// tenant returns tenantOf(secret, header, r).
func (t *tenantHasher) tenant(header string, r *http.Request) string {
	k := credential(header, r)
	m := t.pool.Get().(*tenantMAC)
	m.mac.Reset()
	m.buf = append(append(m.buf[:0], k.kind...), k.value...)
	m.mac.Write(m.buf[:len(k.kind)])
	m.mac.Write(m.buf[len(k.kind):])
	hex.Encode(m.hex[:], m.mac.Sum(m.sum[:0]))
	id := string(m.hex[:])
	// Drop the credential from the pooled state and its scratch.
	m.mac.Reset()
	clear(m.buf)
	if cap(m.buf) > 4<<10 {
		m.buf = nil
	}
	t.pool.Put(m)
	return id
}

// queryKey returns the value of the first key= query parameter, or "".
func queryKey(raw string) string { return queryParam(raw, "key") }

// queryParam returns the unescaped value of the first name= query
// parameter, or "". It avoids url.ParseQuery, which allocates a map for
// every request.
func queryParam(raw, name string) string {
	prefix := name + "="
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		if v, ok := strings.CutPrefix(part, prefix); ok {
			if u, err := url.QueryUnescape(v); err == nil {
				return u
			}
			return v
		}
	}
	return ""
}

// bearer returns the token of an "Authorization: Bearer <token>" value.
func bearer(v string) string {
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// shortTenant is the tenant prefix that may appear in logs.
func shortTenant(t string) string {
	if len(t) > 8 {
		return t[:8]
	}
	return t
}
