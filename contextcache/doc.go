// Package contextcache decides when an explicit context cache
// (cachedContents, gemini-api.md §1.5, §6.2) pays, makes it, and rewrites
// generate requests to use it (issue #8, upstream_state.context_cache).
//
// # Prefixes
//
// A prefix of a generateContent body is its systemInstruction, tools and
// toolConfig plus its first k contents, 0 <= k < len(contents): a request
// naming a cache must carry none of the three fields and at least one
// content. Parse reads the body as byte ranges and keys each prefix by a
// SHA-256 chain over the model id and the raw bytes of those values, so a
// prefix matches only when it is byte-identical. Request.Apply is the body
// surgery: it drops the three fields, keeps the contents from k on and
// adds "cachedContent" at the end; every other byte, unknown fields
// included, is copied unchanged. Request.CreateBody is the matching
// cachedContents create body. Both are pure.
//
// A boundary k where content k-1 has a functionCall part or content k a
// functionResponse part is never used: the API pairs a model turn's calls
// with the next turn's responses and checks the current turn's thought
// signatures (gemini-api.md §4.6, §4.7), and whether it does so across a
// cache boundary is not documented.
//
// # Price model
//
// Prices are US dollars per million tokens: input, cached input, and
// storage per hour. A model without a storage price is never cached. A new
// cache of T tokens, expected to be reused R times within its TTL, pays
// when
//
//	R × (T − C) × (input − cached_input) × (1 − s) > T × input + T × storage × TTL
//
// where creation is billed at the input price, C is the part of the prefix
// already served by a live cache the request used (0 for the first cache),
// and s is the share of the prefix that implicit caching already billed at
// the cached rate on recent requests (observed cachedContentTokenCount ÷
// T, smoothed): an explicit cache saves nothing on tokens that were cached
// anyway. With C = s = 0 this is the inequality. Among the prefixes
// of a request the one with the largest positive margin is created, when
// its estimated tokens reach the model's minimum (DefaultMinTokensByModel,
// gemini-api.md §6.1).
//
// R comes from ExpectedReuses: the smaller of the observed sighting rate
// × TTL, (n − 1) / (last − first) × TTL, and n − 1 (a prefix is not
// expected to recur more often than it already has). A gap longer than the
// TTL restarts the count. T is estimated from the request's own
// usageMetadata: promptTokenCount over the prompt's bytes (moved fields and
// contents) times the prefix's bytes, and is replaced by the exact
// totalTokenCount the create call returns.
//
// # Manager
//
// Manager.Plan runs before the upstream call: it parses the body and, when
// a live cache of the scope holds one of its prefixes (the longest wins),
// returns the body naming it. Manager.Settle runs after the answer: it
// counts the sightings, estimates tokens, and starts cache calls in the
// background, so that creation never adds latency to a request; the cache
// is used from the next request on. A cache in use is renewed (PATCH ttl)
// when less than half its TTL is left and its use rate pays for its
// storage (uses per hour × (input − cached_input) × (1 − s) ≥ storage).
// The use rate is (uses + 1) ÷ age, but at most 1 ÷ time since the last
// use, so a cache that stopped being used loses it. Other caches of the
// scope whose rate no longer pays are deleted when a request of the scope
// settles; the rest expire. Manager.Fallback records why a request naming
// a cache was resent without it (Reason): Gone (403, 404) forgets the
// cache, Refused (a 400 about it) forgets and deletes it, Failed (5xx,
// another 400) keeps it.
//
// The savings counted for a request that used a cache are cached tokens
// × (input − cached_input) × (1 − s), s being the implicit-cache share of
// the cache's prefix as the decision estimated it: only what implicit
// caching would not have billed at the cached rate anyway. Storage is
// counted from creation to when the cache ended: its deletion, or its
// expiry when it expired, its scope was forgotten or a delete failed.
//
// A scope is one tenant, one upstream credential and one model; caches
// never cross scopes, and every call is made with the credential of the
// request that triggered it, a current request of that scope. No
// credential is kept after those calls: a cache of a scope that stops
// sending requests, or whose scope is forgotten, is not deleted but
// expires by its TTL, which the price model already paid for.
//
// State is in memory, per replica, and bounded: MaxPrefixes prefixes and
// MaxScopes scopes (least recently used scopes forgotten first), 512
// prefixes per scope (least recently seen dropped first, in constant time
// from a recency list), 8 live caches per scope, 32 tracked prefixes per
// request, and Options.Workers cache calls in flight (a call finding no
// free worker is dropped and tried on a later request). A request with no
// prefix large enough to cache makes no scope, so callers whose requests
// are all small (or whose credential rotates) cost no memory. The
// bookkeeping runs under one mutex; create bodies are built outside it.
//
// # Fleet
//
// With Options.Shared (cache.Store.ContextCacheRegistry in shared mode)
// the replicas of a fleet decide as one Manager. A scope's state (its live
// caches with name, expiry and uses, its 64 most recently seen prefixes
// with their sightings, token estimates and implicit-cache shares, the
// token ratio, the names of caches ended lately) lives in the registry.
// Plan loads it with one bounded read, only for a request with a prefix
// large enough to cache; Settle, off the request path (Wait waits for it),
// takes the scope's lock, imports the state, settles as a single Manager
// would, and writes the state back. The state marks a prefix whose create
// is in flight, so no other replica starts one. A create also takes the
// prefix's lease (SET NX with the call's time-out): the one replica that
// wins calls the upstream and publishes the entry; a replica that lost,
// which happens only when its settlement could not take the lock, waits up
// to 10 s for the entry and uses that cache. An unreachable registry, or a
// lock held past its short wait, leaves that request to the local state,
// as a single replica. Metrics: a cache counts as live, created and
// (at its expiry) stored at its creator only; the replica that ends it
// early (delete, 403/404) counts its storage.
package contextcache
