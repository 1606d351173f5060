package proxy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
)

// tenantOf returns the tenant id of r: the hex HMAC-SHA256, under secret,
// of the trusted tenant header's value when header is set and present, else
// of the caller's credential (x-goog-api-key, else the key query parameter,
// else an Authorization bearer token). The credential kinds are domain
// separated so that a header value can never collide with a key. Callers
// without any credential share the anonymous tenant.
func tenantOf(secret []byte, header string, r *http.Request) string {
	var material string
	switch {
	case header != "" && r.Header.Get(header) != "":
		material = "header:" + r.Header.Get(header)
	case r.Header.Get("X-Goog-Api-Key") != "":
		material = "key:" + r.Header.Get("X-Goog-Api-Key")
	case queryKey(r.URL.RawQuery) != "":
		material = "key:" + queryKey(r.URL.RawQuery)
	case bearer(r.Header.Get("Authorization")) != "":
		material = "bearer:" + bearer(r.Header.Get("Authorization"))
	case queryParam(r.URL.RawQuery, "access_token") != "":
		// Google APIs also take an OAuth token in the query; such callers
		// must not share the anonymous tenant.
		material = "bearer:" + queryParam(r.URL.RawQuery, "access_token")
	default:
		material = "anonymous:"
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(material))
	var sum [sha256.Size]byte
	return hex.EncodeToString(mac.Sum(sum[:0]))
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
