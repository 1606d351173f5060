package cache

import (
	"bytes"
	"crypto/sha256"
	"sync/atomic"
	"time"
)

// Long-prefix rule of Verifier.Served (see the package doc).
const (
	// MinPrefixBytes is the shortest normalised text, in bytes, accepted as
	// a prefix of a served response.
	MinPrefixBytes = 64
	// LongPrefixBytes is the prefix length, in bytes of normalised text, at
	// which a prefix is accepted whatever share of the response it covers.
	LongPrefixBytes = 2048
	// maxCandidates bounds the responses remembered per indexed prefix.
	maxCandidates = 8
)

// Record value layout: one flag byte; with flagTrail, one length byte and
// the white space the response ended with, exactly as served; then the
// normalised text when it is at least MinPrefixBytes long (shorter
// responses can only match in full, which the key alone proves).
// flagEnd says that the end of the response is known: a record without
// it (a truncated response, or one written before the flag existed) has
// no trail to give.
const (
	flagTruncated = 1
	flagEnd       = 2 // the response's end is known: its trail follows if flagTrail
	flagTrail     = 4 // a length byte and the trailing white space follow
	maxTrail      = 255
)

// recordText returns the normalised text held by a record (empty for a
// response shorter than MinPrefixBytes).
func recordText(rec []byte) []byte {
	if len(rec) < 1 {
		return nil
	}
	if rec[0]&flagTrail != 0 {
		if len(rec) < 2 || len(rec) < 2+int(rec[1]) {
			return nil
		}
		return rec[2+int(rec[1]):]
	}
	return rec[1:]
}

// recordTrail returns the white space a recorded response ended with, and
// whether the record knows it.
func recordTrail(rec []byte) (string, bool) {
	if len(rec) < 1 || rec[0]&flagEnd == 0 {
		return "", false
	}
	if rec[0]&flagTrail == 0 {
		return "", true
	}
	if len(rec) < 2 || len(rec) < 2+int(rec[1]) {
		return "", false
	}
	return string(rec[2 : 2+int(rec[1])]), true
}

// Internal key kinds inside AreaServed.
const (
	kindRecord = "r:"
	kindPrefix = "p:"
)

// RecordServed remembers a model response served to tenant, so that a
// later transcript quoting it can be verified. truncated reports that text
// is only the first part of the response. Empty text is ignored. It costs
// one SHA-256 pass over the normalised text (the prefix hashes are taken
// on the way) and never waits for Redis.
func (s *Store) RecordServed(tenant, text string, truncated bool) {
	r := s.ServedRecorder(tenant)
	r.Grow(len(text))
	r.WriteString(text) //nolint:errcheck // never fails
	r.Served(truncated)
}

// storeServed stores the record rec of response id and indexes its
// prefixes.
func (s *Store) storeServed(tenant string, id digest, rec []byte, prefixes []digest) {
	s.recorded.Add(1)
	a := s.areas[AreaServed]
	a.set(idKey(tenant, kindRecord, id), rec, s.opts.TTL)
	s.addCandidates(tenant, prefixes, id)
	if s.redis != nil {
		s.redis.enqueue(servedWrite{tenant: tenant, id: id, rec: rec, prefixes: append([]digest(nil), prefixes...)})
	}
}

// addCandidate puts id first in the candidate list of prefix p, keeping at
// most maxCandidates distinct ids. more, when not nil, are ids from Redis
// appended after the local ones.
func (s *Store) addCandidate(tenant string, p, id digest, more []byte) {
	k := idKey(tenant, kindPrefix, p)
	mu := s.lock(k)
	mu.Lock()
	defer mu.Unlock()
	if s.putCandidate(k, id, more) {
		s.areas[AreaServed].c.Wait()
	}
}

// addCandidates is addCandidate of id for each of an answer's prefixes
// with one Wait for all the lists that are new instead of one each (a
// round trip to ristretto's policy goroutine per prefix cut): the keys'
// locks are taken together, each once and in index order (no other code
// holds two), and released after the Wait.
func (s *Store) addCandidates(tenant string, prefixes []digest, id digest) {
	var keys [len(prefixCuts)]string
	if len(prefixes) > len(keys) {
		for _, p := range prefixes {
			s.addCandidate(tenant, p, id, nil)
		}
		return
	}
	var held [len(s.locks)]bool
	for i, p := range prefixes {
		keys[i] = idKey(tenant, kindPrefix, p)
		held[s.lockIndex(keys[i])] = true
	}
	for i := range held {
		if held[i] {
			s.locks[i].Lock()
		}
	}
	added := false
	for _, k := range keys[:len(prefixes)] {
		added = s.putCandidate(k, id, nil) || added
	}
	if added {
		s.areas[AreaServed].c.Wait()
	}
	for i := range held {
		if held[i] {
			s.locks[i].Unlock()
		}
	}
}

// putCandidate is addCandidate's read-modify-write of list key k, under
// k's lock. It reports that k was a new key: ristretto applies a new key's
// Set asynchronously, so the caller must Wait, still holding the lock,
// for the next read-modify-write of k to see it instead of starting a new
// list (an update is immediate).
func (s *Store) putCandidate(k string, id digest, more []byte) (added bool) {
	a := s.areas[AreaServed]
	old, _ := a.get(k)
	// Sized exactly: the cost charged is the slice's length.
	list := make([]byte, 0, min(len(old)+len(more)+sha256.Size, maxCandidates*sha256.Size))
	if id != (digest{}) {
		list = append(list, id[:]...)
	}
	for _, src := range [][]byte{old, more} {
		for i := 0; i+sha256.Size <= len(src) && len(list) < cap(list); i += sha256.Size {
			c := src[i : i+sha256.Size]
			if !containsID(list, c) {
				list = append(list, c...)
			}
		}
	}
	if len(list) == 0 {
		return false
	}
	a.setChanged(k, old, list, old != nil, s.opts.TTL)
	return old == nil
}

func containsID(list, id []byte) bool {
	for i := 0; i+sha256.Size <= len(list); i += sha256.Size {
		if bytes.Equal(list[i:i+sha256.Size], id) {
			return true
		}
	}
	return false
}

// Verifier answers for one tenant whether transcript text was served to
// it. It implements rewrite.Verifier. Build one per request with
// Store.Verifier: it carries that request's Redis time budget. Safe for
// concurrent use.
type Verifier struct {
	s      *Store
	tenant string
	spent  atomic.Int64 // nanoseconds of Redis time used
}

// Verifier returns the Verifier for tenant.
func (s *Store) Verifier(tenant string) *Verifier {
	return &Verifier{s: s, tenant: tenant}
}

// Served reports whether text matches a response served to the tenant,
// after whitespace normalisation: in full, or as a prefix of at least
// MinPrefixBytes that covers at least half of the response or at least
// LongPrefixBytes. Text that continues past a served response, or differs
// from it anywhere, is not served. The cost is a SHA-256 of text plus at
// most maxCandidates prefix comparisons, whatever the number of stored
// responses.
func (v *Verifier) Served(text string) bool {
	ok := v.served(text)
	a := v.s.areas[AreaServed]
	if ok {
		v.s.verified.Add(1)
		a.hits.Add(1)
	} else {
		v.s.rejected.Add(1)
		a.misses.Add(1)
	}
	return ok
}

func (v *Verifier) served(text string) bool {
	n := appendNormalized(make([]byte, 0, len(text)), text)
	if len(n) == 0 {
		return false
	}
	id := digest(sha256.Sum256(n))
	if _, ok := v.record(id); ok {
		return true
	}
	c := queryCut(len(n))
	if c == 0 {
		return false
	}
	p := digest(sha256.Sum256(n[:cutAt(n, c)]))
	list := v.candidates(p)
	for i := 0; i+sha256.Size <= len(list); i += sha256.Size {
		rec, ok := v.record(digest(list[i : i+sha256.Size]))
		if ok && isLongPrefix(n, rec) {
			return true
		}
	}
	return false
}

// ServedTrail reports, for text that matches a served response in full
// after whitespace normalisation, the white space that response ended
// with, exactly as served. ok is false for a prefix match, for no match,
// and for a response recorded as truncated. It implements
// rewrite.TrailVerifier, so that an un-flattened model turn is byte for
// byte the served answer. It costs one SHA-256 of text and one lookup.
func (v *Verifier) ServedTrail(text string) (trail string, ok bool) {
	n := appendNormalized(make([]byte, 0, len(text)), text)
	if len(n) == 0 {
		return "", false
	}
	rec, ok := v.record(digest(sha256.Sum256(n)))
	if !ok {
		return "", false
	}
	return recordTrail(rec)
}

// isLongPrefix reports whether n is a long prefix of the record's text.
func isLongPrefix(n, rec []byte) bool {
	if len(rec) < 1 {
		return false
	}
	full := recordText(rec)
	q := len(n)
	if q < MinPrefixBytes || q > len(full) || !bytes.Equal(full[:q], n) {
		return false
	}
	// A client that cuts history at N characters ends anywhere, so any
	// position counts; the length rule keeps a generic opening sentence of
	// a long answer from passing for the answer.
	return 2*q >= len(full) || q >= LongPrefixBytes
}

// record returns the record of response id, from the local cache or, on a
// miss, from Redis (then kept locally).
func (v *Verifier) record(id digest) ([]byte, bool) {
	k := idKey(v.tenant, kindRecord, id)
	a := v.s.areas[AreaServed]
	if rec, ok := a.get(k); ok {
		return rec, true
	}
	r := v.s.redis
	if r == nil || !v.budget() {
		return nil, false
	}
	start := time.Now()
	rec, ok := r.getRecord(v.tenant, id)
	v.spent.Add(int64(time.Since(start)))
	if ok {
		a.set(k, rec, v.s.opts.TTL)
	}
	return rec, ok
}

// candidates returns the candidate ids of prefix p, merged from the local
// cache and Redis.
func (v *Verifier) candidates(p digest) []byte {
	k := idKey(v.tenant, kindPrefix, p)
	local, _ := v.s.areas[AreaServed].get(k)
	r := v.s.redis
	if r == nil || !v.budget() {
		return local
	}
	start := time.Now()
	remote := r.getCandidates(v.tenant, p)
	v.spent.Add(int64(time.Since(start)))
	if len(remote) == 0 {
		return local
	}
	v.s.addCandidate(v.tenant, p, digest{}, remote)
	list := append(append([]byte(nil), local...), remote...)
	return list
}

// budget reports whether the Verifier may still spend time on Redis.
func (v *Verifier) budget() bool {
	return time.Duration(v.spent.Load()) < v.s.opts.RedisBudget
}

// idKey is key(tenant, kind+string(id[:])) built with one allocation.
func idKey(tenant, kind string, id digest) string {
	return tenant + "\x00" + kind + string(id[:])
}
