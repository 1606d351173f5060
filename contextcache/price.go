package contextcache

import (
	"time"
)

// Price is what one model's tokens cost, in US dollars per million tokens.
type Price struct {
	// Input is the price of uncached prompt tokens; cache creation is billed
	// at it too.
	Input float64
	// CachedInput is the price of prompt tokens read from a cache.
	CachedInput float64
	// Storage is the price of keeping a million tokens cached for one hour.
	// Zero means unknown: such a model is never cached.
	Storage float64
}

// known reports whether p is complete enough to decide with: a storage
// price and a cached price below the input price.
func (p Price) known() bool { return p.Storage > 0 && p.Input > p.CachedInput && p.CachedInput >= 0 }

// saving is the dollars per million tokens one reuse saves, given the share
// (0..1) of the prefix that implicit caching already bills at the cached
// price: an explicit cache saves nothing on what was cached anyway.
func (p Price) saving(share float64) float64 {
	return (p.Input - p.CachedInput) * (1 - min(max(share, 0), 1))
}

// Decision inputs for one prefix.
type estimate struct {
	tokens  float64       // tokens the cache would hold
	covered float64       // tokens of the prefix already served by a live cache of the request
	reuses  float64       // expected reuses within the TTL
	share   float64       // implicit-cache share of the prefix
	ttl     time.Duration // the cache's lifetime if nothing renews it
}

// net returns the expected dollars (per request stream, not per million)
// a new cache earns within its TTL:
//
//	reuses × (tokens − covered) × (input − cached_input) × (1 − share)
//	− tokens × input                     (creation is billed as input)
//	− tokens × storage × TTL in hours
//
// With covered = 0 and share = 0 this is the inequality
// reuses × (input − cached) × tokens > creation + storage × tokens × TTL.
func (p Price) net(e estimate) float64 {
	gain := e.reuses * max(e.tokens-e.covered, 0) * p.saving(e.share)
	cost := e.tokens*p.Input + e.tokens*p.Storage*e.ttl.Hours()
	return (gain - cost) / 1e6
}

// Pays reports whether creating a cache of tokens tokens, expected to be
// reused reuses times within ttl, saves more than it costs: the issue's
// inequality reuses × (input − cached_input) × tokens > tokens × input +
// storage × tokens × TTL. A price without a storage price never pays.
func (p Price) Pays(tokens, reuses float64, ttl time.Duration) bool {
	return p.known() && p.net(estimate{tokens: tokens, reuses: reuses, ttl: ttl}) > 0
}

// keeps reports whether a cache used usesPerHour times an hour pays for
// its storage from now on: usesPerHour × saving ≥ storage. Creation is
// sunk by then, so renewing and keeping compare use against storage only.
func (p Price) keeps(usesPerHour, share float64) bool {
	return p.known() && usesPerHour*p.saving(share) >= p.Storage
}

// ExpectedReuses estimates how often a prefix will be seen again within
// ttl from how often it was seen: n sightings from first to last. It is
// the smaller of two figures:
//
//   - the observed rate times the TTL: (n − 1) / (last − first) × ttl,
//     the maximum-likelihood rate of a Poisson stream of sightings (the
//     first sighting starts the clock, the gap is at least one second);
//   - n − 1: a prefix is not expected to recur more often than it has
//     recurred so far (the Lindy rule), which keeps a burst of two quick
//     requests from looking like thousands an hour.
//
// One sighting predicts nothing: ExpectedReuses(1, …) is 0.
func ExpectedReuses(n int, first, last time.Time, ttl time.Duration) float64 {
	if n < 2 {
		return 0
	}
	gap := max(last.Sub(first), time.Second)
	rate := float64(n-1) / gap.Seconds()
	return min(rate*ttl.Seconds(), float64(n-1))
}

// DefaultMinTokens is the minimum cache size, in tokens, of a model with no
// entry of its own: 4,096, the largest figure in gemini-api.md §6.1 (3.x
// models). A too-small cache is rejected by the API, so the default errs
// high.
const DefaultMinTokens = 4096

// DefaultMinTokensByModel are the documented minimum sizes (gemini-api.md
// §6.1, doc revision 2026-07-07 and later) where they are below
// DefaultMinTokens.
var DefaultMinTokensByModel = map[string]int{
	"gemini-2.5-flash": 2048,
	"gemini-2.5-pro":   2048,
}
