package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Block index bounds.
const (
	// MinBlockBytes is the smallest block, in bytes, the block index
	// records (DESIGN §3: smaller blocks are never replaced).
	MinBlockBytes = 512
	// maxBlockQueueBytes bounds the request bodies waiting to be indexed;
	// more are dropped (the index is statistics, not correctness).
	maxBlockQueueBytes = 64 << 20
	// maxBlockQueue bounds their number.
	maxBlockQueue = 64
	// blockConvs is how many recent conversation ids a block entry keeps
	// to count distinct conversations.
	blockConvs = 8
)

// BlockStats describe one block (a fenced code block, a document tag's
// content, or an inlineData payload) seen in a tenant's requests.
type BlockStats struct {
	// Size is the block's size in bytes.
	Size int
	// FirstSeen is when the block was first recorded.
	FirstSeen time.Time
	// Seen counts the requests that contained it.
	Seen int
	// Conversations counts the conversations (requests that share their
	// first turn) that contained it. It is exact up to eight conversations
	// and may overcount beyond, when requests interleave more than eight
	// conversations.
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

// RecordRequest queues a generateContent request body for the block index
// and returns at once: a background worker decodes it. The body is copied.
// When the queue is full the body is dropped (the index is statistics).
func (s *Store) RecordRequest(tenant string, body []byte) {
	s.blocks.enqueue(tenant, body)
}

type blockJob struct {
	tenant string
	body   []byte
}

// blockWorker indexes request bodies off the request path.
type blockWorker struct {
	s      *Store
	queue  chan blockJob
	bytes  atomic.Int64
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

func (w *blockWorker) enqueue(tenant string, body []byte) {
	if len(body) == 0 || w.bytes.Add(int64(len(body))) > maxBlockQueueBytes {
		w.bytes.Add(-int64(len(body)))
		w.dropped.Add(1)
		return
	}
	w.mu.Lock()
	w.pending++
	w.mu.Unlock()
	select {
	case w.queue <- blockJob{tenant: tenant, body: append([]byte(nil), body...)}:
	default:
		w.dropped.Add(1)
		w.finish(len(body))
	}
}

func (w *blockWorker) finish(n int) {
	w.bytes.Add(-int64(n))
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
			w.s.indexBlocks(j.tenant, j.body, time.Now())
			w.finish(len(j.body))
		}
	}
}

func (w *blockWorker) close() {
	close(w.done)
	<-w.exited
	for {
		select {
		case j := <-w.queue:
			w.finish(len(j.body))
		default:
			return
		}
	}
}

// request is the part of a generateContent body the block index reads.
type request struct {
	Contents []json.RawMessage `json:"contents"`
}

type content struct {
	Parts []struct {
		Text       string `json:"text"`
		InlineData *struct {
			Data string `json:"data"`
		} `json:"inlineData"`
		InlineDataSnake *struct {
			Data string `json:"data"`
		} `json:"inline_data"`
	} `json:"parts"`
}

// indexBlocks records every block of a request body once.
func (s *Store) indexBlocks(tenant string, body []byte, now time.Time) {
	var req request
	if json.Unmarshal(body, &req) != nil || len(req.Contents) == 0 {
		return
	}
	conv := sha256.Sum256(req.Contents[0])
	seen := map[digest]int{}
	for _, raw := range req.Contents {
		var c content
		if json.Unmarshal(raw, &c) != nil {
			continue
		}
		for _, p := range c.Parts {
			for _, b := range textBlocks(p.Text) {
				seen[sha256.Sum256([]byte(b))] = len(b)
			}
			for _, d := range []*struct {
				Data string `json:"data"`
			}{p.InlineData, p.InlineDataSnake} {
				if d != nil && len(d.Data) >= MinBlockBytes {
					seen[sha256.Sum256([]byte(d.Data))] = len(d.Data)
				}
			}
		}
	}
	for h, size := range seen {
		s.countBlock(tenant, hex.EncodeToString(h[:]), size, conv[:8], now)
	}
}

// countBlock adds one sighting of a block to the index.
func (s *Store) countBlock(tenant, sha string, size int, conv []byte, now time.Time) {
	k := key(tenant, sha)
	a := s.areas[AreaBlocks]
	mu := s.lock(k)
	mu.Lock()
	defer mu.Unlock()
	v, ok := a.get(k)
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

// textBlocks returns the fenced code blocks and document-tag contents of
// text that are at least MinBlockBytes long.
func textBlocks(text string) []string {
	if len(text) < MinBlockBytes {
		return nil
	}
	var out []string
	lines := strings.SplitAfter(text, "\n")
	for i := 0; i < len(lines); i++ {
		fence, ok := openFence(lines[i])
		if !ok {
			continue
		}
		var body strings.Builder
		j := i + 1
		for ; j < len(lines); j++ {
			if closesFence(lines[j], fence) {
				break
			}
			body.WriteString(lines[j])
		}
		if body.Len() >= MinBlockBytes {
			out = append(out, body.String())
		}
		i = j
	}
	for _, tag := range []string{"file", "document", "source", "context"} {
		rest := text
		for {
			i := strings.Index(rest, "<"+tag)
			if i < 0 {
				break
			}
			rest = rest[i+1+len(tag):]
			if rest == "" || (rest[0] != '>' && rest[0] != ' ') {
				continue
			}
			gt := strings.IndexByte(rest, '>')
			end := strings.Index(rest, "</"+tag+">")
			if gt < 0 || end < gt {
				break
			}
			if b := rest[gt+1 : end]; len(b) >= MinBlockBytes {
				out = append(out, b)
			}
			rest = rest[end:]
		}
	}
	return out
}

// openFence reports whether line opens a CommonMark fence (up to three
// spaces, then at least three backticks or tildes) and returns the fence.
func openFence(line string) (string, bool) {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 || len(t) < 3 || (t[0] != '`' && t[0] != '~') {
		return "", false
	}
	n := 0
	for n < len(t) && t[n] == t[0] {
		n++
	}
	if n < 3 {
		return "", false
	}
	return t[:n], true
}

// closesFence reports whether line closes fence.
func closesFence(line, fence string) bool {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 || !strings.HasPrefix(t, fence) {
		return false
	}
	return strings.TrimRight(strings.TrimLeft(t, fence[:1]), " \t\r\n") == ""
}
