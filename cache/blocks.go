package cache

import (
	"encoding/binary"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// Block index bounds.
const (
	// MinBlockBytes is the smallest block, in bytes, the block index
	// records (DESIGN §3: smaller blocks are never replaced).
	MinBlockBytes = 512
	// maxBlockQueue bounds the requests whose blocks wait to be indexed;
	// more are dropped (the index is statistics, not correctness). Each
	// holds only the hashes and sizes of its new turn's blocks.
	maxBlockQueue = 1024
	// blockConvs is how many recent conversation ids a block entry keeps
	// to count distinct conversations.
	blockConvs = 8
)

// BlockStats describe one block (a fenced code block, a document, a
// project tree or tab list, a run of repeated lines, or an image, as the
// rewriter finds them) seen in the new turn of a tenant's requests.
type BlockStats struct {
	// Size is the block's size in bytes (rewrite.Block.Bytes).
	Size int
	// FirstSeen is when the block was first recorded.
	FirstSeen time.Time
	// Seen counts the requests whose new turn (last content) contained it.
	// A block re-sent with the history of later requests counts once, in
	// the request that added it.
	Seen int
	// Conversations counts the conversations (requests that share their
	// first content, rewrite.Report.ConversationID) that contained it. It
	// is exact up to eight conversations and may overcount beyond, when
	// requests interleave more than eight conversations.
	Conversations int
}

// block entry layout: size, first seen (unix ns), seen, conversations
// (uint64 each), then up to blockConvs 8-byte conversation ids.
const blockHeader = 32

func (b BlockStats) encode(convs []byte) []byte {
	out := make([]byte, blockHeader, blockHeader+len(convs))
	binary.LittleEndian.PutUint64(out[0:], uint64(b.Size))
	binary.LittleEndian.PutUint64(out[8:], uint64(b.FirstSeen.UnixNano()))
	binary.LittleEndian.PutUint64(out[16:], uint64(b.Seen))
	binary.LittleEndian.PutUint64(out[24:], uint64(b.Conversations))
	return append(out, convs...)
}

func decodeBlock(v []byte) (BlockStats, []byte, bool) {
	if len(v) < blockHeader {
		return BlockStats{}, nil, false
	}
	return BlockStats{
		Size:          int(binary.LittleEndian.Uint64(v[0:])),
		FirstSeen:     time.Unix(0, int64(binary.LittleEndian.Uint64(v[8:]))),
		Seen:          int(binary.LittleEndian.Uint64(v[16:])),
		Conversations: int(binary.LittleEndian.Uint64(v[24:])),
	}, v[blockHeader:], true
}

// Block returns what the index knows of the block whose SHA-256 (hex) is
// sha, for tenant.
func (s *Store) Block(tenant, sha string) (BlockStats, bool) {
	v, ok := s.areas[AreaBlocks].get(key(tenant, sha))
	if !ok {
		return BlockStats{}, false
	}
	b, _, ok := decodeBlock(v)
	return b, ok
}

// RecordBlocks queues the blocks of a request's new turn
// (rewrite.Report.Blocks) for the block index and returns at once: a
// background worker counts them. conv is the request's
// rewrite.Report.ConversationID. Blocks smaller than MinBlockBytes are
// ignored. blocks is not copied and must not be modified after the call.
// When the queue is full the blocks are dropped (the index is statistics).
func (s *Store) RecordBlocks(tenant, conv string, blocks []rewrite.Block) {
	if len(blocks) == 0 {
		return
	}
	s.blocks.enqueue(blockJob{tenant: tenant, conv: convID(conv), blocks: blocks})
}

// convID returns the 8 bytes that identify a conversation in a block
// entry: the first 8 bytes of the hex hash conv, or conv's first bytes
// when it is not hex.
func convID(conv string) [8]byte {
	var id [8]byte
	if len(conv) >= 16 {
		if _, err := hex.Decode(id[:], []byte(conv[:16])); err == nil {
			return id
		}
	}
	copy(id[:], conv)
	return id
}

type blockJob struct {
	tenant string
	conv   [8]byte
	blocks []rewrite.Block
}

// blockWorker indexes blocks off the request path.
type blockWorker struct {
	s      *Store
	queue  chan blockJob
	done   chan struct{}
	exited chan struct{}

	mu      sync.Mutex
	cond    *sync.Cond
	pending int

	dropped atomic.Uint64
}

func newBlockWorker(s *Store) *blockWorker {
	w := &blockWorker{s: s, queue: make(chan blockJob, maxBlockQueue), done: make(chan struct{}), exited: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	go w.run()
	return w
}

func (w *blockWorker) enqueue(j blockJob) {
	w.mu.Lock()
	w.pending++
	w.mu.Unlock()
	select {
	case w.queue <- j:
	default:
		w.dropped.Add(1)
		w.finish()
	}
}

func (w *blockWorker) finish() {
	w.mu.Lock()
	w.pending--
	if w.pending == 0 {
		w.cond.Broadcast()
	}
	w.mu.Unlock()
}

func (w *blockWorker) wait() {
	w.mu.Lock()
	for w.pending > 0 {
		w.cond.Wait()
	}
	w.mu.Unlock()
}

func (w *blockWorker) run() {
	defer close(w.exited)
	for {
		select {
		case <-w.done:
			return
		case j := <-w.queue:
			now := time.Now()
			for _, b := range j.blocks {
				if b.Bytes >= MinBlockBytes && b.SHA256 != "" {
					w.s.countBlock(j.tenant, b.SHA256, b.Bytes, j.conv[:], now)
				}
			}
			w.finish()
		}
	}
}

func (w *blockWorker) close() {
	close(w.done)
	<-w.exited
	for {
		select {
		case <-w.queue:
			w.finish()
		default:
			return
		}
	}
}

// countBlock adds one sighting of a block to the index.
func (s *Store) countBlock(tenant, sha string, size int, conv []byte, now time.Time) {
	k := key(tenant, sha)
	a := s.areas[AreaBlocks]
	mu := s.lock(k)
	mu.Lock()
	defer mu.Unlock()
	v, _ := a.get(k)
	b, convs, ok := decodeBlock(v)
	if ok {
		a.hits.Add(1)
	} else {
		a.misses.Add(1)
		b = BlockStats{Size: size, FirstSeen: now}
	}
	b.Seen++
	known := false
	for i := 0; i+8 <= len(convs); i += 8 {
		if string(convs[i:i+8]) == string(conv) {
			known = true
		}
	}
	if !known {
		b.Conversations++
		nc := append(append([]byte(nil), conv...), convs...)
		convs = nc[:min(len(nc), blockConvs*8)]
	}
	a.set(k, b.encode(convs), s.opts.TTL)
	if !ok {
		a.c.Wait() // see addCandidate: a new key's Set is asynchronous
	}
}
