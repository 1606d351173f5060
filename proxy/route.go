package proxy

import (
	"strings"
)

// Route is the closed set of route labels the proxy classifies requests
// into. It is used as a metrics label and in the access log.
type Route string

// Routes. Every request gets exactly one.
const (
	RouteGenerate           Route = "generate_content"
	RouteStreamGenerate     Route = "stream_generate_content"
	RouteCountTokens        Route = "count_tokens"
	RouteEmbedContent       Route = "embed_content"
	RouteBatchEmbedContents Route = "batch_embed_contents"
	RouteModels             Route = "models"
	RouteCachedContents     Route = "cached_contents"
	RouteFiles              Route = "files"
	RouteUpload             Route = "upload"
	RouteInteractions       Route = "interactions"
	RouteBatches            Route = "batches"
	RouteOther              Route = "other"
)

// Routes lists every Route in a stable order.
var Routes = []Route{
	RouteGenerate, RouteStreamGenerate, RouteCountTokens, RouteEmbedContent,
	RouteBatchEmbedContents, RouteModels, RouteCachedContents, RouteFiles,
	RouteUpload, RouteInteractions, RouteBatches, RouteOther,
}

// isGenerate reports whether r is a generateContent or streamGenerateContent route.
func (r Route) isGenerate() bool { return r == RouteGenerate || r == RouteStreamGenerate }

// routeInfo is what classify learns from a path.
type routeInfo struct {
	route  Route
	model  string // normalised model name from the path, "" when none
	vertex bool   // a Vertex AI path (projects/… or publishers/…)
}

// isVersion reports whether seg is an API version path segment.
func isVersion(seg string) bool {
	switch seg {
	case "v1beta", "v1", "v1alpha", "v1beta1":
		return true
	}
	return false
}

// classify maps a request path (BasePath already removed) to its route,
// model and backend. It never fails: unknown shapes are RouteOther.
func classify(path string) routeInfo {
	// Split into an array on the stack: strings.Split allocated the slice
	// of every request.
	var buf [16]string
	segs := buf[:0]
	for seg := range strings.SplitSeq(strings.Trim(path, "/"), "/") {
		segs = append(segs, seg)
	}
	v := -1
	for i, s := range segs {
		if isVersion(s) {
			v = i
			break
		}
	}
	if v < 0 || v == len(segs)-1 {
		return routeInfo{route: RouteOther}
	}
	upload := v > 0 && segs[v-1] == "upload"
	rest := segs[v+1:]
	var info routeInfo
	if rest[0] == "projects" || rest[0] == "publishers" {
		info.vertex = true
	}
	// Skip a Vertex projects/{p}/locations/{l} scope.
	if len(rest) >= 4 && rest[0] == "projects" && rest[2] == "locations" {
		rest = rest[4:]
		if len(rest) == 0 {
			return routeInfo{route: RouteOther, vertex: true}
		}
	}
	// Skip a publishers/{pub} scope.
	if len(rest) >= 3 && rest[0] == "publishers" {
		rest = rest[2:]
	}
	last := rest[len(rest)-1]
	method := ""
	if i := strings.LastIndexByte(last, ':'); i >= 0 {
		method = last[i+1:]
	}
	for i := 0; i+1 < len(rest); i++ {
		if rest[i] == "models" || rest[i] == "tunedModels" {
			m := rest[i+1]
			if j := strings.IndexByte(m, ':'); j >= 0 {
				m = m[:j]
			}
			if rest[i] == "tunedModels" {
				m = "tunedModels/" + m
			}
			info.model = normalizeModel(m)
			break
		}
	}
	switch {
	case upload:
		info.route = RouteUpload
	case method == "generateContent":
		info.route = RouteGenerate
	case method == "streamGenerateContent":
		info.route = RouteStreamGenerate
	case method == "countTokens" || method == "computeTokens":
		info.route = RouteCountTokens
	case method == "embedContent":
		info.route = RouteEmbedContent
	case method == "batchEmbedContents":
		info.route = RouteBatchEmbedContents
	case method == "batchGenerateContent" || method == "asyncBatchEmbedContent":
		info.route = RouteBatches
	case method != "":
		info.route = RouteOther
	default:
		info.route = RouteOther
		if r, ok := collectionRoutes[strings.TrimSuffix(rest[0], ":"+method)]; ok {
			info.route = r
		}
	}
	if method != "" && info.route == RouteOther {
		// Resource methods such as files/{id}:download or batches/{id}:cancel.
		if r, ok := collectionRoutes[rest[0]]; ok && r != RouteModels {
			info.route = r
		}
	}
	return info
}

// collectionRoutes maps a top-level API collection to its route.
var collectionRoutes = map[string]Route{
	"models":         RouteModels,
	"tunedModels":    RouteModels,
	"cachedContents": RouteCachedContents,
	"files":          RouteFiles,
	"interactions":   RouteInteractions,
	"batches":        RouteBatches,
}

// normalizeModel turns "models/gemini-2.5-flash-001",
// "publishers/google/models/gemini-2.5-flash" or "Gemini-2.5-Flash" into
// "gemini-2.5-flash": resource prefixes are removed, the name is
// lower-cased, and a gemini- model loses a trailing three-digit version
// suffix (other families, such as text-embedding-004, keep it).
//
// A name without a slash has no prefix to remove: looking for "models/"
// in it was a third of the function's cost on every request.
func normalizeModel(m string) string {
	if strings.IndexByte(m, '/') >= 0 {
		if i := strings.LastIndex(m, "models/"); i >= 0 && !strings.HasPrefix(m, "tunedModels/") {
			m = m[i+len("models/"):]
		}
	}
	m = strings.ToLower(m)
	if n := len(m); n > 4 && strings.HasPrefix(m, "gemini-") && m[n-4] == '-' && isDigit(m[n-3]) && isDigit(m[n-2]) && isDigit(m[n-1]) {
		m = m[:n-4]
	}
	return m
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// DefaultModelAllowlist is the allowlist used when Options.ModelAllowlist is
// nil: the Gemini models current when this was written, every model of
// the default price table (config.DefaultPrices) among them
// (TestDefaultAllowlistCoversKnownModels).
var DefaultModelAllowlist = []string{
	"gemini-2.0-flash", "gemini-2.0-flash-lite",
	"gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.5-pro",
	"gemini-3-flash-preview", "gemini-3-pro-preview", "gemini-3.1-pro-preview",
	"gemini-3.1-flash-lite", "gemini-3.5-flash", "gemini-3.5-flash-lite",
	"gemini-3.6-flash", "gemini-3.7-flash",
	"gemini-flash-latest", "gemini-flash-lite-latest", "gemini-pro-latest",
	"gemini-embedding-001", "text-embedding-004",
}

// Model label values that are not model names.
const (
	modelOther = "_other" // a model not on the allowlist
	modelNone  = "_none"  // a route without a model
)

// modelLabel maps a normalised model name to a metrics label value.
func (h *Handler) modelLabel(model string) string {
	if model == "" {
		return modelNone
	}
	if _, ok := h.models[model]; ok {
		return model
	}
	return modelOther
}
