package contextcache

import (
	"crypto/sha256"
	"encoding/json"
	"slices"
	"time"
)

// Shared is the fleet-wide registry of the Managers of several replicas
// (cache.Store's ContextCacheRegistry in shared mode): each scope's state
// (live caches, prefix sightings, the token ratio) under a lock, and one
// create lease per prefix. Values are opaque to it. Every method is
// bounded in time and reports ok false when the registry could not be
// used (Redis down, slow, or the lock held elsewhere past a short wait);
// the Manager then works on its own state, as a single replica does.
type Shared interface {
	// Load returns the state of (tenant, scope), without locking; found
	// is false when there is none.
	Load(tenant, scope string) (state []byte, found, ok bool)
	// Lock takes the lock of (tenant, scope) for at most lease and returns
	// its state (nil when none) and the token that releases it.
	Lock(tenant, scope string, lease time.Duration) (state []byte, token string, ok bool)
	// Unlock stores state for ttl and releases the lock, only while token
	// still holds it; it reports whether the state was stored.
	Unlock(tenant, scope, token string, state []byte, ttl time.Duration) bool
	// Claim takes the create lease of prefix key of (tenant, scope) for
	// lease (SET NX): won is true for the one caller that may create the
	// cache. A caller that did not win gets the lease's value: nil while
	// the winner is creating, the winner's entry once it published one.
	Claim(tenant, scope string, key [sha256.Size]byte, lease time.Duration) (won bool, val []byte, ok bool)
	// Publish replaces the lease of key with val for ttl: the entry of the
	// cache the winner created.
	Publish(tenant, scope string, key [sha256.Size]byte, val []byte, ttl time.Duration) bool
}

// Bounds of the shared state.
const (
	// maxSharedPrefixes bounds the prefixes of a scope kept in the shared
	// state: the most recently seen, more than one request tracks
	// (maxCandidates).
	maxSharedPrefixes = 2 * maxCandidates
	// maxTombstones bounds the names of ended caches the shared state
	// remembers, so that the replica that created one forgets it.
	maxTombstones = 16
	// lockLease bounds how long a replica holds a scope's lock: a
	// crashed holder blocks the scope's shared updates at most this long.
	lockLease = 2 * time.Second
	// claimWait bounds how long a replica that lost a create lease waits
	// for the winner's entry (on a cache-call worker, never on a request).
	claimWait = 10 * time.Second
	// claimPoll is how often it looks.
	claimPoll = 50 * time.Millisecond
)

// sharedState is a scope's state as stored in the registry.
type sharedState struct {
	Ratio    float64        `json:"r,omitempty"`
	Caches   []sharedEntry  `json:"c,omitempty"`
	Prefixes []sharedPrefix `json:"p,omitempty"`
	Ended    []string       `json:"e,omitempty"` // names of caches ended lately
}

// sharedEntry is a live cache, times in Unix nanoseconds.
type sharedEntry struct {
	Name    string  `json:"n"`
	Key     []byte  `json:"k"`
	K       int     `json:"i"`
	Size    int     `json:"s"`
	Tokens  float64 `json:"t"`
	Created int64   `json:"c"`
	Expire  int64   `json:"x"`
	LastUse int64   `json:"l"`
	Uses    int     `json:"u"`
}

// sharedPrefix is what is known of a prefix.
type sharedPrefix struct {
	Key       []byte  `json:"k"`
	N         int     `json:"n"`
	First     int64   `json:"f"`
	Last      int64   `json:"l"`
	Tokens    float64 `json:"t"`
	Share     float64 `json:"s,omitempty"`
	ShareSeen bool    `json:"o,omitempty"`
	RetryAt   int64   `json:"r,omitempty"`
	TooSmall  bool    `json:"m,omitempty"`
	// Creating is when the create a replica started ends at the latest;
	// zero when none is in flight.
	Creating int64 `json:"w,omitempty"`
}

func unixTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (e *entry) shared() sharedEntry {
	return sharedEntry{Name: e.name, Key: e.key[:], K: e.k, Size: e.size, Tokens: e.tokens,
		Created: unixNano(e.created), Expire: unixNano(e.expire), LastUse: unixNano(e.lastUse), Uses: e.uses}
}

// exportLocked encodes s for the registry: its live caches, its most
// recently seen prefixes, the names of caches ended lately.
func (m *Manager) exportLocked(s *scope) []byte {
	st := sharedState{Ratio: s.ratio, Ended: s.ended}
	now := m.now()
	for _, c := range s.caches {
		st.Caches = append(st.Caches, c.shared())
	}
	slices.SortFunc(st.Caches, func(a, b sharedEntry) int { return a.K - b.K })
	for p := s.recent.next; p != &s.recent && len(st.Prefixes) < maxSharedPrefixes; p = p.next {
		sp := sharedPrefix{Key: p.key[:], N: p.n, First: unixNano(p.first), Last: unixNano(p.last),
			Tokens: p.tokens, Share: p.share, ShareSeen: p.shareSeen, RetryAt: unixNano(p.retryAt), TooSmall: p.tooSmall}
		if p.creating || now.Before(p.creatingUntil) {
			sp.Creating = unixNano(p.creatingUntil)
		}
		st.Prefixes = append(st.Prefixes, sp)
	}
	b, _ := json.Marshal(st) // plain values: cannot fail
	return b
}

// importLocked makes s what the registry says, raw being its state: the
// prefixes it lists take its figures (oldest first, so that the newest
// ends first in the recency list), its caches replace the scope's, and a
// cache of this replica it does not list is kept unless it is named as
// ended (its registration may not have landed). An undecodable state
// changes nothing.
func (m *Manager) importLocked(s *scope, raw []byte) {
	var st sharedState
	if len(raw) == 0 || json.Unmarshal(raw, &st) != nil {
		return
	}
	if st.Ratio > 0 {
		s.ratio = st.Ratio
	}
	if len(st.Ended) > maxTombstones {
		st.Ended = st.Ended[len(st.Ended)-maxTombstones:]
	}
	s.ended = st.Ended
	for i := len(st.Prefixes) - 1; i >= 0; i-- {
		sp := st.Prefixes[i]
		var k Key
		if len(sp.Key) != len(k) {
			continue
		}
		copy(k[:], sp.Key)
		p := m.prefixLocked(s, k)
		p.n, p.first, p.last, p.tokens = sp.N, unixTime(sp.First), unixTime(sp.Last), sp.Tokens
		p.share, p.shareSeen, p.retryAt, p.tooSmall = sp.Share, sp.ShareSeen, unixTime(sp.RetryAt), sp.TooSmall
		if !p.creating {
			// Another replica is creating it until then (zero: none is):
			// as for a create in flight here, no other replica starts one.
			p.creatingUntil = unixTime(sp.Creating)
		}
	}
	listed := make(map[string]bool, len(st.Caches))
	for _, se := range st.Caches {
		var k Key
		if len(se.Key) != len(k) || se.Name == "" {
			continue
		}
		copy(k[:], se.Key)
		listed[se.Name] = true
		e := s.caches[k]
		if e == nil || e.name != se.Name {
			if e != nil {
				m.forgetLocked(s, e)
			}
			e = &entry{name: se.Name, key: k}
			s.caches[k] = e
		}
		e.k, e.size, e.tokens, e.uses = se.K, se.Size, se.Tokens, se.Uses
		e.created, e.expire, e.lastUse = unixTime(se.Created), unixTime(se.Expire), unixTime(se.LastUse)
	}
	for _, c := range s.caches {
		if listed[c.name] || (c.own && !slices.Contains(s.ended, c.name)) {
			continue
		}
		// Ended by another replica, which counted its storage.
		m.forgetLocked(s, c)
	}
}

// noteEndedLocked records that the cache called name ended, for the other
// replicas.
func noteEndedLocked(s *scope, name string) {
	if slices.Contains(s.ended, name) {
		return
	}
	s.ended = append(s.ended, name)
	if len(s.ended) > maxTombstones {
		s.ended = slices.Delete(s.ended, 0, len(s.ended)-maxTombstones)
	}
}

// stateTTL is how long a scope's shared state outlives its last write:
// its caches live at most the TTL past their last renewal, and a prefix
// not seen for a TTL starts its count again.
func (m *Manager) stateTTL() time.Duration { return 2 * m.ttl }

// sharedUpdate runs edit on the scope of c under the registry's lock,
// with the registry's state imported first and the result exported
// after. Without a registry, or when the lock is not taken, edit runs on
// the local state alone and nothing is written. It reports whether the
// registry was updated. edit runs with m.mu held; s is nil when the scope
// is not tracked and create is false.
func (m *Manager) sharedUpdate(c Call, create bool, edit func(s *scope)) bool {
	var (
		raw    []byte
		token  string
		locked bool
	)
	if m.shared != nil {
		raw, token, locked = m.shared.Lock(c.Tenant, c.Scope, lockLease)
	}
	m.mu.Lock()
	s := m.scopes[c.Scope]
	if s == nil && (create || locked && raw != nil) {
		s = m.newScopeLocked(c)
	}
	if s != nil && locked {
		m.importLocked(s, raw)
	}
	edit(s)
	var out []byte
	if s = m.scopes[c.Scope]; s != nil && locked {
		// edit may have made the scope.
		out = m.exportLocked(s)
	}
	m.mu.Unlock()
	if !locked {
		return false
	}
	if out == nil {
		// Nothing tracked: release the lock, keep the state.
		return m.shared.Unlock(c.Tenant, c.Scope, token, nil, 0)
	}
	return m.shared.Unlock(c.Tenant, c.Scope, token, out, m.stateTTL())
}

// loadShared imports the registry's state of c's scope before a plan.
func (m *Manager) loadShared(c Call) {
	raw, found, ok := m.shared.Load(c.Tenant, c.Scope)
	if !ok || !found {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.scopes[c.Scope]
	if s == nil {
		s = m.newScopeLocked(c)
	}
	m.importLocked(s, raw)
}

// claim decides, for a create job in shared mode, whether this replica
// makes the cache. It returns true to create; false when another replica
// holds the lease, after waiting (at most claimWait) for the winner's
// entry and adopting it into the local scope when it came.
func (m *Manager) claim(call Call, job *createJob) bool {
	won, val, ok := m.shared.Claim(call.Tenant, call.Scope, job.key, callTimeout+lockLease)
	if !ok || won {
		// An unreachable registry: create, as a single replica does.
		return true
	}
	deadline := time.Now().Add(claimWait)
	for val == nil && time.Now().Before(deadline) {
		time.Sleep(claimPoll)
		if won, val, ok = m.shared.Claim(call.Tenant, call.Scope, job.key, callTimeout+lockLease); won || !ok {
			// The winner's lease ran out without an entry (its create
			// failed or it died), or the registry is gone: this replica
			// tries.
			return true
		}
	}
	var se sharedEntry
	m.mu.Lock()
	defer m.mu.Unlock()
	job.p.creating, job.p.creatingUntil = false, time.Time{}
	if val == nil || json.Unmarshal(val, &se) != nil || se.Name == "" {
		if s := m.scopes[call.Scope]; s != nil {
			if p := s.prefixes[job.key]; p != nil {
				p.retryAt = m.now().Add(m.ttl)
			}
		}
		return false
	}
	s := m.scopes[call.Scope]
	if s == nil || s.caches[job.key] != nil || len(s.caches) >= maxScopeCaches {
		return false
	}
	s.caches[job.key] = &entry{name: se.Name, key: job.key, k: se.K, size: se.Size, tokens: se.Tokens,
		created: unixTime(se.Created), expire: unixTime(se.Expire), lastUse: unixTime(se.LastUse), uses: se.Uses}
	return false
}
