// Package cache is the proxy's per-tenant memory (DESIGN §2, §4): what it
// served, which blocks recur, and a generic per-tenant area. It knows
// nothing of HTTP.
//
// # Storage
//
// A Store holds one ristretto cache per Area, each with a fixed share of
// Options.MaxBytes (served 6/8, blocks 1/8, conversations 1/8) so that one
// kind of entry cannot evict another. Every entry costs its value's length
// plus a fixed per-entry overhead that BenchmarkServedMemory measures, and
// each area's admission counters are paid from its share, so the Store's
// memory stays near MaxBytes. Entries expire Options.TTL after their last
// write. Ristretto applies writes asynchronously and may drop them; call
// Store.Wait before asserting on a write.
//
// # Tenants
//
// Every key starts with the tenant id, the proxy's keyed hash of the
// caller's credential or trusted tenant header; ristretto keeps only a
// 128-bit hash of the key. No method takes a key from one tenant and looks
// in another. Prompt and response text is hashed (SHA-256) before it is
// part of any key, locally or in Redis.
//
// # Served responses and Verifier
//
// Store.RecordServed indexes a model response by the SHA-256 of its
// whitespace-normalised text (runs of white space become one space, ends
// trimmed), and by the SHA-256 of its first 64, 256, 1 Ki, 4 Ki, 16 Ki,
// 64 Ki and 256 Ki bytes (cut back to a rune boundary). The full-text
// entry holds a flag byte, the white space the response ended with (up to
// 255 bytes, exactly as served; none for a truncated response) and the
// normalised text (only from 64 bytes on); each prefix entry holds up to
// eight response ids. Verifier.ServedTrail gives that trailing white space
// for a full match, so that an un-flattened model turn is byte for byte
// the served answer (rewrite.TrailVerifier). Store.ServedRecorder makes the
// same entries from a response whose text arrives in pieces (the events
// of a stream), normalising and hashing each piece as it is written, eight
// bytes at a time over plain text; RecordServed is one write to it.
//
// Verifier.Served(text) normalises text and says true when
//   - its hash is a served response's (a full match, any length), or
//   - it is at least MinPrefixBytes (64) long and a byte-exact prefix of a
//     served response, covering at least half of it or at least
//     LongPrefixBytes (2 KiB).
//
// The prefix check looks up the hash of the query's first C bytes, C the
// largest indexed cut not above its length, and compares the query with at
// most eight candidate texts: one hash lookup plus O(len(text)) work,
// independent of the number of stored responses. Text that goes past the
// end of a served response, or that differs from it anywhere, is false:
// an "Assistant:" line the proxy did not serve, or a served answer with
// words appended, is never verified. The 64-byte floor keeps short
// openings ("Sure, here is") from passing; half the response (or 2 KiB,
// beyond which a coincidence is implausible and clients commonly cap each
// history entry) keeps a generic first sentence of a long answer from
// passing for the answer, while a client that truncates long answers in
// its history still gets them verified.
//
// # Redis
//
// With Options.RedisURL, the served-response index is also kept in Redis
// under "gemini-proxy:<tenant>:r:<hex hmac>" (the record) and
// "gemini-proxy:<tenant>:p:<hex hmac>" (a list of candidate ids), all
// with the TTL, so replicas behind a load balancer verify each other's
// responses. Redis is not trusted (issue 16): the hmac in a key is keyed by
// Options.Secret, so a key names no digest of text that a reader could
// confirm a guess with, nor one a writer could choose; every value starts
// with HMAC(secret, key, value) and every candidate id carries a tag of the
// same kind, so a value forged, altered or moved under another key is a
// miss, counted in RedisStats.Invalid. Values are authenticated, not
// encrypted: the normalised text of served answers is readable by whoever
// can read Redis. The local cache stays in front: a local miss asks Redis and
// keeps the answer. RecordServed never waits for Redis: a bounded queue
// feeds one writer that pipelines the writes, and drops (and counts) what
// does not fit; Close writes what is still queued, for at most
// Options.RedisFlush. Each read is bounded by Options.RedisTimeout and one
// request's Verifier spends at most Options.RedisBudget on Redis. After an
// error the Store logs once, counts it, and stops that kind of call (reads
// or writes, separately: a Redis that refuses writes still serves reads)
// for a second before it tries again, so a stopped or slow Redis never fails a request
// and adds at most a bounded delay. A response served by one replica is
// visible to the others once its write landed (about a Redis round trip
// after the response body was read); a request that arrives earlier at another
// replica is forwarded without un-flattening that answer.
//
// # Block index
//
// Store.RecordBlocks queues the blocks the rewriter found in a request's
// new turn (rewrite.Report.Blocks: fenced code, documents, project trees
// and tab lists, repeated runs, images, each with its SHA-256 and size) and
// the request's rewrite.Report.ConversationID(); a background worker counts
// each block of at least MinBlockBytes: size, first seen, requests seen in,
// and conversations seen in (a conversation is identified by its first
// content). Only the new turn is counted, since the earlier turns were the
// new turn of earlier requests: the cost per request is bounded by what it
// adds, and nothing decodes a body again. Store.Block reads an entry. It is
// local to each replica: nothing that changes what is sent or billed reads
// it (Store.Block has no caller outside tests), so sharing it would cost a
// Redis write per request and change nothing a fleet sends.
//
// # Generic area
//
// Store.Get and Store.Set give per-tenant, byte-bounded, TTL-limited
// storage by key (AreaConversations). Store.Conversation and
// Store.SetConversation use the same area and, in shared mode, also Redis
// ("gemini-proxy:<tenant>:c:<key>", with the TTL; written through the same
// queue as served responses, read on a local miss): the proxy keeps its
// Interactions API ids and session state there (issue 8), so that any
// replica can continue a conversation another one started.
// Store.Conversations reads many keys with one MGET. In shared mode Redis
// is asked first, even for keys held locally: a conversation's turns go to
// any replica, and a key such as the ledger's state under a
// conversation's start is rewritten every turn, so a local copy may be
// older than another replica's write; the local copy answers while this
// replica's own write of the key is still queued, and when Redis is
// unavailable. Unlike Set, SetConversation returns only once the local
// write is visible, so the next request on this replica finds it.
//
// # Deployments
//
// Options.RedisURL names one server (redis://, rediss://), a Cluster
// (addr= query parameters add seeds, or Options.RedisCluster) or a
// Sentinel set-up (redis-sentinel://, rediss-sentinel://, or
// Options.RedisMasterName), all through go-redis's universal client;
// Options.RedisTLS adds CA and client-certificate files. The bounds are
// the same whatever the URL says: calls by Options.RedisTimeout, dials by
// ten times that, no go-redis retries, three Cluster redirects. In Cluster
// mode no command spans slots: conversation lookups of several keys are a
// pipeline of GETs (go-redis sends one batch per node, in parallel), and
// the context-cache registry's keys of one scope share a hash tag, so that
// its unlock script, which reads the lock and writes the state, runs in
// one slot.
//
// # Context-cache registry
//
// Store.ContextCacheRegistry (shared mode only) implements
// contextcache.Shared: per scope "gemini-proxy:<tenant>:x:{<hmac>}s" (the
// state, sealed like every value), "…}l" (the lock: SET NX PX with a
// random token, released by a script only while it holds the token) and
// "…}n<hmac>" per prefix (the create lease: SET NX, then the winner's
// sealed entry). Every call is bounded by Options.RedisTimeout and goes
// through the read and write breakers; Lock retries for at most 500 ms
// while another replica holds the lock, then reports not ok (counted in
// RedisStats.LockTimeouts).
//
// Verifier does not implement rewrite.Memo. A warm memo made turn 50 of a
// conversation slower than no memo at all (BenchmarkTurn50, -count 5
// medians: warm 462 µs, cold 568 µs, no memo 372 µs), since segmenting a
// turn costs less than looking its analysis up and checking it; see the
// rewrite package documentation.
package cache
