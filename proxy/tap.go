package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// Usage is the token accounting of one response: the last usageMetadata
// seen (Gemini streams repeat cumulative totals, so the last one is
// authoritative; gemini-api.md §5.2). PromptTokens includes CachedTokens.
type Usage struct {
	PromptTokens        int64 `json:"promptTokenCount"`
	CachedTokens        int64 `json:"cachedContentTokenCount"`
	CandidatesTokens    int64 `json:"candidatesTokenCount"`
	ThoughtsTokens      int64 `json:"thoughtsTokenCount"`
	ToolUsePromptTokens int64 `json:"toolUsePromptTokenCount"`
	TotalTokens         int64 `json:"totalTokenCount"`
}

// Tap limits. The tap gives up on (or skips) anything larger, so that its
// memory stays bounded whatever the upstream sends.
const (
	// MaxTextBytes bounds the model response text captured for Exchange.Text.
	MaxTextBytes = 1 << 20
	// maxEventBytes bounds one SSE event or one JSON object the tap decodes;
	// larger ones (big inline images) are skipped, the stream is not.
	maxEventBytes = 8 << 20
	// tailBytes is how much of a large object the tap keeps, and decodes,
	// when it only needs usageMetadata and modelVersion.
	tailBytes = 64 << 10
	// maxGzipBytes bounds the compressed copy kept of a gzip response.
	maxGzipBytes = 8 << 20
	// maxGunzipBytes bounds what the tap decompresses from that copy.
	maxGunzipBytes = 64 << 20
)

// tap parses a generate response incrementally as it is copied to the
// client. Write never fails and never blocks; on any trouble the tap stops
// parsing (or skips one oversized event) and the copy goes on untouched.
// It understands unary JSON, SSE (data: lines, \n\n or \r\n\r\n) and a
// streamed JSON array, and gzip-compressed variants of each (decoded from a
// bounded copy when the body ends). Not safe for concurrent use.
type tap struct {
	// objBox and outBox are the pointers objBuffers and streamBufs gave
	// t.obj and t.st.out in (nil when none is held): putObj and putStream
	// return the buffers in them, so returning one allocates no slice
	// header.
	objBox, outBox *[]byte

	mode    byte // 0 undecided, 'o' JSON objects, 's' SSE, 'x' gave up
	gzipped bool
	gz      []byte

	// SSE state.
	line     []byte
	lineOver bool
	data     []byte
	dataOver bool

	// JSON object scanner state.
	base, depth int
	inStr, esc  bool
	capturing   bool
	obj         []byte
	objOver     bool
	objTrimmed  bool // obj holds only the tail of a large object

	// needText asks for the model's text; without it the tap reads only
	// usageMetadata and modelVersion, which is much cheaper on large bodies.
	needText bool
	// ix reads an Interactions API response (tapix.go) instead of a
	// GenerateContentResponse; its usage comes before the steps, so its
	// objects are kept whole, up to maxEventBytes.
	ix            bool
	finished      bool
	usage         *Usage
	usageBuf      Usage // what usage points to when the scanner read it
	modelVersion  string
	text          tapText
	textTruncated bool
	events        int
	sc            chunkScanner
	// memo is the scanner's memo of the events' common prefix
	// (chunkScanner.scanMemo); noMemo, for the tests, scans every event
	// whole, as before the memo (the oracle of tapmemo_test.go).
	memo   pathMemo
	noMemo bool

	// The first text of a large object, streamed (tapstream.go): pre
	// decides, st reads it, ph is the offset of its placeholder in obj
	// (when phOn), tm the text before it.
	pre  preScan
	st   strStream
	ph   int
	phOn bool
	tm   textMark

	// budget is the process-wide memory budget (budget.go) the tap's
	// buffers draw on past tapFreeBytes; held is what they took.
	budget *memBudget
	held   int64
}

// room reports whether the tap's buffers may grow by extra bytes: always
// up to tapFreeBytes in all, past that only with bytes taken from the
// memory budget (in tapBudgetStep units, so not once per chunk). A refusal
// makes the caller skip what it was buffering, as for an event over
// maxEventBytes.
func (t *tap) room(extra int) bool {
	if t.budget == nil {
		return true
	}
	need := int64(len(t.line)+len(t.data)+len(t.obj)+len(t.gz)+extra) - tapFreeBytes
	if need <= t.held {
		return true
	}
	step := (need - t.held + tapBudgetStep - 1) / tapBudgetStep * tapBudgetStep
	if !t.budget.take(step, budgetTap) {
		return false
	}
	t.held += step
	return true
}

// release drops the tap's buffers and gives back what they took of the
// memory budget. It runs when the response is over, also when it was cut
// and finish did not run.
func (t *tap) release() {
	t.endStream()
	t.putStream()
	t.line, t.data, t.gz = nil, nil, nil
	t.putObj()
	if t.memo.tail != nil {
		t.memo.tail.ok = false
		tailMemos.Put(t.memo.tail)
		t.memo.tail = nil
	}
	t.budget.give(t.held)
	t.held = 0
}

// newTap returns a tap for a body with the given Content-Encoding. It
// returns nil for encodings it cannot decode. needText asks for the
// model's text (Exchange.Text) as well as usage.
func newTap(contentEncoding string, needText bool) *tap {
	switch strings.ToLower(strings.TrimSpace(contentEncoding)) {
	case "", "identity":
		return &tap{needText: needText, text: tapText{keep: true}}
	case "gzip", "x-gzip":
		return &tap{gzipped: true, needText: needText, text: tapText{keep: true}}
	}
	return nil
}

// tapText is the model's text as the tap reads it: kept whole for
// Exchange.Text when keep is set, and written on to w (Options.ServedText)
// when there is one, so that recording the served answer needs no copy of
// it.
type tapText struct {
	// b is a byte slice, not a strings.Builder, so that Rewind of a
	// streamed text (tapstream.go) truncates it instead of copying the
	// text kept so far.
	b    []byte
	keep bool
	n    int
	w    ServedWriter
	// shared reports that String handed b's bytes out as a string (no
	// copy of a long answer's text): b is not written in place again,
	// thaw copies it first.
	shared bool
}

// Len returns the bytes of text read so far.
func (x *tapText) Len() int { return x.n }

// thaw gives b bytes of its own again after String shared them, before
// b is written or truncated and written over.
func (x *tapText) thaw() {
	if x.shared {
		x.b, x.shared = slices.Clone(x.b), false
	}
}

// Grow makes room for n more bytes.
func (x *tapText) Grow(n int) {
	if x.keep && cap(x.b)-len(x.b) < n {
		x.thaw()
		// At least doubling: slices.Grow of what is missing grows a
		// large slice by a quarter, so a long answer read piece by piece
		// was copied some twenty times on its way to 256 KB.
		x.b = slices.Grow(x.b, max(n, cap(x.b)))
	}
	if x.w != nil {
		x.w.Grow(n)
	}
}

// Write adds p to the text.
func (x *tapText) Write(p []byte) {
	x.n += len(p)
	if x.keep {
		x.thaw()
		x.b = append(x.b, p...)
	}
	if x.w != nil {
		x.w.Write(p) //nolint:errcheck // a ServedWriter never fails
	}
}

// WriteString adds s to the text.
func (x *tapText) WriteString(s string) {
	x.n += len(s)
	if x.keep {
		x.thaw()
		x.b = append(x.b, s...)
	}
	if x.w != nil {
		x.w.WriteString(s) //nolint:errcheck // a ServedWriter never fails
	}
}

// truncate keeps the first k bytes of the text kept (k <= len(b)); what
// is written next goes over the rest.
func (x *tapText) truncate(k int) {
	x.thaw()
	x.b = x.b[:k]
}

// String returns the text kept ("" without keep).
// It is called once the body is read, once or twice (OnServed, OnExchange):
// it shares b's bytes instead of copying them (the copy of a 256 KB
// answer's text was a tenth of its cost in the tap); a write after it
// copies b first (thaw), so the string never changes.
func (x *tapText) String() string {
	if len(x.b) == 0 {
		return ""
	}
	x.shared = true
	return unsafe.String(unsafe.SliceData(x.b), len(x.b))
}

// Write feeds body bytes to the tap. It always reports len(p), nil.
func (t *tap) Write(p []byte) (int, error) {
	if t.gzipped {
		if t.mode != 'x' {
			if len(t.gz)+len(p) > maxGzipBytes || !t.room(len(p)) {
				t.mode, t.gz = 'x', nil
				if t.needText {
					t.textTruncated = true
				}
			} else {
				t.gz = append(t.gz, p...)
			}
		}
		return len(p), nil
	}
	t.feed(p)
	return len(p), nil
}

func (t *tap) feed(p []byte) {
	if t.mode == 0 {
		p = bytes.TrimLeft(p, " \t\r\n\ufeff")
		if len(p) == 0 {
			return
		}
		switch p[0] {
		case '{':
			t.mode = 'o'
		case '[':
			t.mode, t.base = 'o', 1
		case 'd', 'e', 'i', 'r', ':':
			t.mode = 's'
		default:
			t.mode = 'x'
		}
	}
	switch t.mode {
	case 'o':
		t.objects(p)
	case 's':
		t.sse(p)
	}
}

// finish is called once the body has ended; it decodes a gzip copy and
// dispatches an SSE event left without its blank line.
func (t *tap) finish() {
	if t.finished {
		return
	}
	t.finished = true
	if t.gzipped && t.mode != 'x' && len(t.gz) > 0 {
		zr, err := gzip.NewReader(bytes.NewReader(t.gz))
		t.gz = nil
		if err != nil {
			t.mode = 'x'
			return
		}
		buf := make([]byte, 32<<10)
		r := &io.LimitedReader{R: zr, N: maxGunzipBytes}
		for t.mode != 'x' {
			n, err := r.Read(buf)
			t.feed(buf[:n])
			if err != nil {
				break
			}
		}
		if r.N <= 0 && t.needText {
			// Cut at maxGunzipBytes: the text read is a prefix at most.
			t.textTruncated = true
		}
	}
	if t.mode == 's' {
		if len(t.line) > 0 || t.lineOver {
			t.endLine()
		}
		t.dispatchSSE()
	}
	t.release()
}

func (t *tap) sse(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.appendLine(p)
			return
		}
		if n := t.eventInPlace(p[:i], p[i+1:]); n >= 0 {
			p = p[i+1+n:]
			continue
		}
		t.appendLine(p[:i])
		p = p[i+1:]
		t.endLine()
	}
}

// eventInPlace reads an event whose one data line and the blank line that
// ends it are both in the bytes written, where they are: line is the data
// line (without its \n), rest what follows it. It returns how many bytes
// of rest it read (the blank line), or -1, reading nothing, for anything
// else, which appendLine and endLine read as before. A stream flushed
// event by event (Gemini's) is read so without copying each event into
// line and again into data. Nothing of p is kept past the decode.
func (t *tap) eventInPlace(line, rest []byte) int {
	if len(t.line) > 0 || t.lineOver || len(t.data) > 0 || t.dataOver || len(line) > maxEventBytes {
		return -1
	}
	n := 0
	switch {
	case len(rest) >= 1 && rest[0] == '\n':
		n = 1
	case len(rest) >= 2 && rest[0] == '\r' && rest[1] == '\n':
		n = 2
	default:
		return -1
	}
	line = bytes.TrimSuffix(line, []byte{'\r'})
	v, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok || len(v)+1 > maxEventBytes {
		return -1
	}
	if len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	if len(v) > 0 {
		t.decode(v, false)
	}
	return n
}

func (t *tap) appendLine(p []byte) {
	if t.lineOver {
		return
	}
	if len(t.line)+len(p) > maxEventBytes || !t.room(len(p)) {
		t.lineOver, t.line = true, t.line[:0]
		return
	}
	t.line = append(t.line, p...)
}

func (t *tap) endLine() {
	line := bytes.TrimSuffix(t.line, []byte{'\r'})
	over := t.lineOver
	t.line, t.lineOver = t.line[:0], false
	switch {
	case over:
		t.dataOver = true
	case len(line) == 0:
		t.dispatchSSE()
	case bytes.HasPrefix(line, []byte("data:")):
		v := line[len("data:"):]
		if len(v) > 0 && v[0] == ' ' {
			v = v[1:]
		}
		if len(t.data) == 0 && !t.dataOver && len(v) > 4<<10 {
			// The event's first data line: keep it where it is instead of
			// copying it, and read the next line into data's buffer. A
			// large event (a 7 MB image) is held once, not twice.
			t.line, t.data = t.data[:0], v
			return
		}
		if t.dataOver || len(t.data)+len(v)+1 > maxEventBytes || !t.room(len(v)+1) {
			t.dataOver, t.data = true, t.data[:0]
			return
		}
		if len(t.data) > 0 {
			t.data = append(t.data, '\n')
		}
		t.data = append(t.data, v...)
	}
}

func (t *tap) dispatchSSE() {
	if t.dataOver && t.needText {
		// An event too large to read may hold text: what follows it is
		// not a continuation of what came before, so the text is a
		// prefix of the answer at most.
		t.textTruncated = true
	}
	if !t.dataOver && len(t.data) > 0 {
		t.decode(t.data, false)
	}
	t.data, t.dataOver = t.data[:0], false
}

// objects scans for top-level JSON objects (the body itself, or the
// elements of a streamed array) and decodes each as it completes.
func (t *tap) objects(p []byte) {
	start, i := -1, 0
	switch {
	case t.st.on:
		// Inside the streamed string (tapstream.go).
		j, over := t.streamText(p, 0)
		if j == len(p) && !over {
			return
		}
		start, i = j, j
		if !over {
			t.inStr = false // p[j] ends the string; the skeleton goes on with it
			i++
		}
	case t.capturing:
		start = 0
	}
	for ; i < len(p); i++ {
		c := p[i]
		if t.inStr {
			if t.esc {
				t.esc = false // c is the escaped byte
				continue
			}
			// Skip to the next quote or backslash, eight bytes at a time.
			// (Looking for the quote first and then for a backslash before
			// it read the rest of p again after every escape: a 256 KB
			// answer with a new line every few words was scanned hundreds
			// of times.)
			j := quoteOrBackslash(p, i)
			if j == len(p) {
				break
			}
			i = j
			if p[i] == '\\' {
				t.esc = true
			} else {
				t.inStr = false
				if t.pre.inName {
					t.pre.endName(p, i)
				}
			}
			continue
		}
		switch c {
		case '"':
			t.inStr = true
			if t.pre.active && t.pre.str(i) {
				// The object's first text: streamed (tapstream.go).
				if !t.startStream(p[start : i+1]) {
					start = i + 1
					continue
				}
				j, over := t.streamText(p, i+1)
				switch {
				case over:
					start, i = j, j-1 // the framing goes on inside the string
				case j == len(p):
					return
				default:
					t.inStr = false // p[j] ends the string; the skeleton goes on with it
					start, i = j, j
				}
			}
		case '{', '[':
			if c == '{' && t.depth == t.base && !t.capturing {
				t.capturing, start = true, i
				t.obj, t.objOver, t.objTrimmed = t.obj[:0], false, false
				t.pre = preScan{active: t.streamable()}
			}
			t.depth++
			if t.pre.active {
				t.pre.open(c == '{')
			}
		case '}', ']':
			t.depth--
			if t.depth < 0 {
				t.mode = 'x'
				return
			}
			if t.pre.active {
				t.pre.close()
			}
			if c == '}' && t.depth == t.base && t.capturing {
				if len(t.obj) == 0 && !t.objOver && !t.objTrimmed && i+1-start <= maxEventBytes {
					t.decode(p[start:i+1], false) // whole object in p: no copy
				} else {
					t.appendObj(p[start : i+1])
					switch {
					case t.phOn:
						t.decodeStreamed()
					case !t.objOver:
						t.decode(t.obj, t.objTrimmed)
					}
				}
				t.capturing, start = false, -1
				t.pre.active = false
			}
		case ',':
			if t.pre.active {
				t.pre.comma()
			}
		case ':':
			if t.pre.active {
				t.pre.name = false
			}
		}
	}
	if t.capturing && start >= 0 {
		t.appendObj(p[start:])
	}
	if t.pre.inName {
		t.pre.nameAt = -1 // the name goes on in the next read
	}
}

// quoteOrBackslash returns the index of the first quote or backslash in p
// from i, or len(p).
func quoteOrBackslash(p []byte, i int) int {
	for ; i+8 <= len(p); i += 8 {
		x := binary.LittleEndian.Uint64(p[i:])
		if hasByte(x, '"') || hasByte(x, '\\') {
			break
		}
	}
	for ; i < len(p); i++ {
		if p[i] == '"' || p[i] == '\\' {
			return i
		}
	}
	return i
}

// objBuffers recycles the tap's object buffers between responses.
var objBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 3*tailBytes); return &b }}

func (t *tap) appendObj(p []byte) {
	if t.objOver {
		return
	}
	if t.obj == nil {
		t.obj = getPooled(&objBuffers, &t.objBox)
	}
	if (!t.needText && !t.ix || t.objTrimmed) && len(t.obj)+len(p) > 2*tailBytes {
		// Only usageMetadata and modelVersion are wanted, and Gemini writes
		// them after the candidates: keep the last tailBytes.
		if need := len(t.obj) + len(p); cap(t.obj) < need {
			t.obj = append(make([]byte, 0, max(need, 3*tailBytes)), t.obj...)
		}
		t.obj = append(t.obj, p...)
		n := copy(t.obj, t.obj[len(t.obj)-tailBytes:])
		t.obj, t.objTrimmed = t.obj[:n], true
		return
	}
	size := len(t.obj) + len(p)
	if t.phOn {
		size += t.st.raw // the streamed string is part of the object
	}
	if size > maxEventBytes || !t.room(len(p)) {
		if t.phOn {
			t.rewindText()
			t.phOn = false
		}
		if t.needText && !t.ix {
			// Too large to decode whole (inline images, say): read its
			// usageMetadata and modelVersion from its tail, as without
			// text. Its text is lost, so the text captured so far is only
			// a prefix of the response.
			t.textTruncated = true
			t.obj, t.objTrimmed = lastBytes(t.obj, p, tailBytes), true
			return
		}
		t.objOver, t.obj = true, t.obj[:0]
		return
	}
	if need := len(t.obj) + len(p); need > cap(t.obj) {
		// Double: append grows a large slice by a quarter at a time, and a
		// 256 KB answer arriving in 32 KB reads was copied over and over.
		grown := make([]byte, len(t.obj), min(max(need, 2*cap(t.obj)), maxEventBytes))
		copy(grown, t.obj)
		t.putObj()
		t.obj = grown
	}
	t.obj = append(t.obj, p...)
}

// maxPooledObj is the largest object buffer the tap returns to objBuffers.
const maxPooledObj = 1 << 20

// putObj returns the tap's object buffer to objBuffers when it is not too
// large to keep.
func (t *tap) putObj() {
	if t.obj != nil && cap(t.obj) <= maxPooledObj {
		putPooled(&objBuffers, &t.objBox, t.obj)
	}
	t.obj = nil
}

// getPooled takes a buffer from pool, of *[]byte, and keeps the pointer
// it came in in *box.
func getPooled(pool *sync.Pool, box **[]byte) []byte {
	bp := pool.Get().(*[]byte)
	*box = bp
	return (*bp)[:0]
}

// putPooled returns b to pool in the pointer *box (a new one when there is
// none) and clears *box. The pointer is the caller's own since the Get: it
// holds whichever buffer b now is.
func putPooled(pool *sync.Pool, box **[]byte, b []byte) {
	bp := *box
	if bp == nil {
		bp = new([]byte)
	}
	*bp = b[:0]
	pool.Put(bp)
	*box = nil
}

// lastBytes returns the last n bytes of a followed by b in a buffer from
// objBuffers; a's large buffer is left to the collector.
func lastBytes(a, b []byte, n int) []byte {
	buf := (*objBuffers.Get().(*[]byte))[:0]
	if k := n - len(b); k > 0 {
		buf = append(buf, a[max(len(a)-k, 0):]...)
		return append(buf, b...)
	}
	return append(buf, b[len(b)-n:]...)
}

// tapChunk is the part of a GenerateContentResponse the tap reads.
type tapChunk struct {
	Candidates []struct {
		Index   int `json:"index"`
		Content struct {
			Parts []struct {
				Text    string `json:"text"`
				Thought bool   `json:"thought"`
			} `json:"parts"`
		} `json:"content"`
	} `json:"candidates"`
	UsageMetadata *Usage `json:"usageMetadata"`
	ModelVersion  string `json:"modelVersion"`
}

// tapUsage is the part of a response the tap reads when text is not needed.
type tapUsage struct {
	UsageMetadata *Usage `json:"usageMetadata"`
	ModelVersion  string `json:"modelVersion"`
}

// decode reads one GenerateContentResponse. tail reports that b is only
// the end of a large object; large objects are read from their end as well
// when no text is needed.
func (t *tap) decode(b []byte, tail bool) {
	if t.ix {
		t.decodeInteraction(b)
		return
	}
	if tail || (!t.needText && len(b) > tailBytes) {
		if t.needText && len(b) > tailBytes {
			// Only the oversized objects of appendObj come here: read
			// exactly the last tailBytes, whatever the writes were.
			b = b[len(b)-tailBytes:]
		}
		t.decodeTail(b)
		return
	}
	t.sc.rawText = t.jsonText()
	if t.sc.scanMemo(b, t.needText, -1, false, t.pathMemo()) {
		t.events++
		t.apply(&t.sc)
		return
	}
	if !t.needText {
		var u tapUsage
		if json.Unmarshal(b, &u) != nil {
			return
		}
		t.events++
		t.record(u.UsageMetadata, u.ModelVersion)
		return
	}
	var c tapChunk
	if err := json.Unmarshal(b, &c); err != nil {
		return
	}
	t.events++
	t.record(c.UsageMetadata, c.ModelVersion)
	for _, cand := range c.Candidates {
		if cand.Index != 0 {
			continue
		}
		for _, part := range cand.Content.Parts {
			if part.Thought || part.Text == "" {
				continue
			}
			if k := t.textRoom(len(part.Text)); k >= 0 {
				t.text.WriteString(part.Text[:k])
			}
		}
	}
}

// pathMemo returns the memo the tap's scans take, nil with noMemo.
func (t *tap) pathMemo() *pathMemo {
	if t.noMemo {
		return nil
	}
	return &t.memo
}

// apply records what chunkScanner read, as decode does for encoding/json.
func (t *tap) apply(sc *chunkScanner) {
	if sc.hasUsage && (t.usage == nil || *t.usage != sc.usage) {
		// Into the tap's own value, not a new one per event: a stream
		// repeats its cumulative usage in every event. The tap is not
		// reused, so t.usage holds still once the response is over.
		t.usageBuf = sc.usage
		t.usage = &t.usageBuf
	}
	if len(sc.modelVersion) > 0 && string(sc.modelVersion) != t.modelVersion {
		t.modelVersion = string(sc.modelVersion)
	}
	if n := len(sc.texts); n > 0 && !t.textTruncated {
		size := 0
		for _, text := range sc.texts {
			size += len(text)
		}
		t.text.Grow(min(size, MaxTextBytes-t.text.Len()))
	}
	for k, text := range sc.texts {
		if k < 64 && sc.escaped&(1<<k) != 0 {
			t.addEscaped(sc, text)
			continue
		}
		if k := t.textRoom(len(text)); k >= 0 {
			t.text.Write(text[:k])
		}
	}
	clear(sc.texts) // drop references to the body
	sc.texts, sc.b, sc.modelVersion, sc.escaped = sc.texts[:0], nil, nil, 0
	if cap(sc.scratch) > minPooledScratch {
		// A large text's buffer is not kept for the next event: it goes
		// back to the pool, its texts copied out above.
		putScratch(sc.scratch)
		sc.scratch = nil
	}
}

// addEscaped adds a text still JSON-escaped (chunkScanner.escaped): to
// the jsonTextWriter as it is, as far as it reads it, and unescaped for
// what it stops at (surrogates, invalid UTF-8) and when the tap keeps the
// text or it may reach MaxTextBytes (a byte of raw stands for one byte of
// text at most).
func (t *tap) addEscaped(sc *chunkScanner, raw []byte) {
	if t.textTruncated {
		return
	}
	if jw, ok := t.text.w.(jsonTextWriter); ok && !t.text.keep && t.text.Len()+len(raw) <= MaxTextBytes {
		used, n := jw.WriteJSON(raw)
		t.text.n += n
		if raw = raw[used:]; len(raw) == 0 {
			return
		}
	}
	text := sc.unquote(raw) // from a whole escape or rune on: its own text
	if k := t.textRoom(len(text)); k >= 0 {
		t.text.Write(text[:k])
	}
}

// textRoom returns how many bytes of a text of n bytes the tap's text
// takes, up to MaxTextBytes in all, and marks it truncated when that is
// fewer than n; -1 once it is truncated (nothing more is added).
func (t *tap) textRoom(n int) int {
	if t.textTruncated {
		return -1
	}
	if room := MaxTextBytes - t.text.Len(); n > room {
		t.textTruncated = true
		return room
	}
	return n
}

// jsonText reports whether the tap's text goes only to a jsonTextWriter,
// which reads it escaped.
func (t *tap) jsonText() bool {
	_, ok := t.text.w.(jsonTextWriter)
	return ok && !t.text.keep
}

func (t *tap) record(u *Usage, modelVersion string) {
	if u != nil {
		t.usage = u
	}
	if modelVersion != "" {
		t.modelVersion = modelVersion
	}
}

// decodeTail finds the last "usageMetadata" and "modelVersion" members in
// b and decodes just their values. Inside JSON strings a quote is always
// escaped, so the quoted key followed by a colon is a real key; Gemini
// writes both after the candidates, so the last occurrence is top-level.
func (t *tap) decodeTail(b []byte) {
	t.events++
	var u *Usage
	if v := lastMember(b, `"usageMetadata"`); v != nil {
		var x Usage
		if json.NewDecoder(bytes.NewReader(v)).Decode(&x) == nil {
			u = &x
		}
	}
	var mv string
	if v := lastMember(b, `"modelVersion"`); v != nil {
		json.NewDecoder(bytes.NewReader(v)).Decode(&mv) //nolint:errcheck // best effort
	}
	t.record(u, mv)
}

// lastMember returns b from the value of the last member named key (a
// quoted JSON string), or nil. An occurrence counts only where a member
// name can start: after '{' or ',' (white space aside) and not inside a
// longer string (a key such as "a\"usageMetadata" in model-written
// functionCall args ends with the same bytes).
func lastMember(b []byte, key string) []byte {
	for end := len(b); ; {
		i := bytes.LastIndex(b[:end], []byte(key))
		if i < 0 {
			return nil
		}
		end = i
		before := bytes.TrimRight(b[:i], " \t\r\n")
		if len(before) == 0 || (before[len(before)-1] != '{' && before[len(before)-1] != ',') {
			continue
		}
		v := bytes.TrimLeft(b[i+len(key):], " \t\r\n")
		if len(v) == 0 || v[0] != ':' {
			continue
		}
		return v[1:]
	}
}

// tapBody tees a response body into a tap as the ReverseProxy reads it.
type tapBody struct {
	rc  io.ReadCloser
	t   *tap
	eof bool // the whole body was read
	// left is what the Content-Length says remains to be read, -1 when
	// unknown. When h is set, h.served(st) is called once, as soon as the
	// whole body was read: before Read returns its last bytes, so before
	// the client can have them (issue 13, defect 4).
	left int64
	h    *Handler
	st   *reqState
}

func (b *tapBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.t.Write(p[:n]) //nolint:errcheck // never fails
		if b.left > 0 {
			if b.left -= int64(n); b.left <= 0 {
				b.eof = true
			}
		}
	}
	if err == io.EOF {
		b.eof = true
	}
	if b.eof && b.h != nil {
		h := b.h
		b.h = nil
		h.served(b.st)
	}
	return n, err
}

func (b *tapBody) Close() error { return b.rc.Close() }
