package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gemini-proxy/gemini-proxy/internal/implicitcache"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// The ledger (issue 14) prices what the proxy saved against what Gemini
// would have billed for the client's own request, with implicit caching:
//
//	counterfactual = (P_n − K_n) × input + K_n × cached_input + the rest
//	actual         = (P_a − K_a) × input + K_a × cached_input + the rest
//
// where P_a and K_a are promptTokenCount and cachedContentTokenCount of
// the response, P_n = P_a + the estimated tokens the rewrite removed, and
// K_n is the part of P_n the client's request shares with the previous
// request of its conversation, as the client sent it (within the implicit
// cache's window and at least its minimum). The rest (tool-use prompt,
// output and thinking tokens) is the same in both and cancels out. Where
// the proxy sent the client's bytes unchanged, the counterfactual is the
// actual bill.

// Ledger defaults.
const (
	// DefaultImplicitCacheWindow is how long the counterfactual assumes a
	// prefix stays in the implicit cache when LedgerOptions.
	// ImplicitCacheWindow is zero. Google documents no figure ("a short
	// time"); five minutes is the emulator's model.
	DefaultImplicitCacheWindow = 5 * time.Minute
	// ledgerChunk is the text chunk, in bytes, at which prefixes are
	// compared inside a text part: a flattened transcript is one text part
	// that grows, and Gemini caches the part of it that did not change. A
	// prompt that ends inside a chunk the next request extends is matched
	// through its end, or through the part of its last chunk the next one
	// keeps (tail).
	ledgerChunk = 512
	// ledgerKeyBytes is how much of a prompt's serialised start names its
	// conversation: a prompt shorter than that is below any implicit-cache
	// minimum, so missing its state loses nothing.
	ledgerKeyBytes = 1024
	// maxLedgerSums bounds the checkpoint hashes kept per prompt in the
	// conversation state (8 bytes each, two prompts: at most 16 KiB).
	maxLedgerSums = 1024
	// localLedgerConversations bounds the in-process state used when no
	// store is configured.
	localLedgerConversations = 4096
)

// LedgerOptions configures the net dollar ledger.
type LedgerOptions struct {
	// Store keeps each conversation's previous prompt (checkpoint hashes
	// and token estimates, never text) per tenant; cache.Store satisfies
	// it, in Redis in shared mode. Nil keeps the state of at most 4096
	// conversations in this process.
	Store InteractionStore
	// HoldoutFraction (0..1) is the share of conversations, chosen
	// deterministically from the tenant and the conversation's start,
	// that are forwarded unrewritten so that their billed cost measures
	// what the rewrite saves (gemini_proxy_ledger_* by group). Zero
	// rewrites every conversation.
	HoldoutFraction float64
	// ImplicitCacheMinTokens maps normalised model names to the smallest
	// prefix Gemini caches implicitly (0: off). A model without an entry
	// uses the table of internal/implicitcache, documented and recorded
	// figures that the emulator models Gemini with too.
	ImplicitCacheMinTokens map[string]int
	// ImplicitCacheWindow is how long a prefix is assumed to stay in the
	// implicit cache. Zero means DefaultImplicitCacheWindow.
	ImplicitCacheWindow time.Duration
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// WeighCompaction passes the rewrite, for each request of a
	// conversation whose sent prompts were never compacted, what the
	// previous request sent (rewrite.Options.Sent), so that compaction
	// of turns already sent happens only when it pays against the
	// implicit cache's cached rate (rewrite.cache_aware_compaction).
	WeighCompaction bool
}

// ledger keeps the per-conversation state and records the ledger metrics.
// Safe for concurrent use.
type ledger struct {
	m        *metrics.Metrics
	sav      *savings
	store    InteractionStore
	holdout  float64
	minByMod map[string]int
	window   time.Duration
	now      func() time.Time
	secret   []byte
	weigh    bool
	// memo remembers recently laid out contents (layoutMemo).
	memo *layoutMemo
	// turnChildren and modelChildren remember the ledger metrics'
	// children by their labels (childCache).
	turnChildren  childCache[labelPair, ledgerTurnCounters]
	modelChildren childCache[string, ledgerModelCounters]
}

// ledgerTurnCounters are the children of the gemini_proxy_ledger_*
// counters of one group and turn bucket.
type ledgerTurnCounters struct {
	requests, billed, squares, counterfactual prometheus.Counter
}

// ledgerModelCounters are the children of the net saving's two counters
// of one model label.
type ledgerModelCounters struct {
	saved, increase prometheus.Counter
}

func newLedger(o LedgerOptions, m *metrics.Metrics, sav *savings, secret []byte, memoBytes int) (*ledger, error) {
	if o.HoldoutFraction < 0 || o.HoldoutFraction > 1 || math.IsNaN(o.HoldoutFraction) {
		return nil, errors.New("proxy: holdout fraction must be in [0, 1]")
	}
	l := &ledger{m: m, sav: sav, store: o.Store, holdout: o.HoldoutFraction, window: o.ImplicitCacheWindow, now: o.Now, secret: secret, weigh: o.WeighCompaction, memo: newLayoutMemo(memoBytes)}
	if l.store == nil {
		l.store = newLocalStore(localLedgerConversations)
	}
	if l.window <= 0 {
		l.window = DefaultImplicitCacheWindow
	}
	if l.now == nil {
		l.now = time.Now
	}
	l.minByMod = make(map[string]int, len(o.ImplicitCacheMinTokens))
	for name, n := range o.ImplicitCacheMinTokens {
		l.minByMod[normalizeModel(name)] = n
	}
	return l, nil
}

// minTokens is the smallest prefix the counterfactual bills at the
// cached rate for model; +Inf where implicit caching is off.
func (l *ledger) minTokens(model string) float64 {
	n, ok := l.minByMod[model]
	if !ok {
		n = implicitcache.Min(model)
	}
	if n <= 0 {
		return math.Inf(1)
	}
	return float64(n)
}

// layout is one prompt as the implicit cache sees it, in the order the
// model reads it: the head (model, systemInstruction, tools, toolConfig),
// then per content its role and its parts, text parts cut into
// ledgerChunk-byte chunks. After each unit there is a checkpoint: the
// SHA-256 chain of everything so far (its first 8 bytes), and the bytes
// and fixed tokens up to there, from which estimate gives tokens.
type layout struct {
	sums  []uint64
	bytes []int     // text and raw JSON bytes up to each checkpoint
	fixed []float64 // role and media tokens up to each checkpoint
	// key names the conversation's start: the chain at ledgerKeyBytes
	// (its first ledgerEndBytes). ends are the chain at the end of each
	// content: the previous request of a conversation that only grows is
	// one of them. The store's keys hold them in hex (stateKeys).
	key  [ledgerEndBytes]byte
	ends [][ledgerEndBytes]byte
	// leads and texts are, per checkpoint that ends a text chunk, what
	// was hashed since the previous checkpoint before the chunk's text
	// (part markers) and the chunk's text; nil and "" elsewhere. The tail
	// match (tailOf, sharedTokens) reads them. leads are shared
	// (textLeads) and texts may alias the body: neither is written.
	leads [][]byte
	texts []string
	// esc are the chunks of escaped texts, "" in texts, unescaped from
	// body when read (text).
	esc  []escChunk
	body []byte
	// explicit reports a cachedContent request, which implicit caching
	// does not model.
	explicit bool
	// media reports an inline or file data part, whose tokens do not
	// follow from its bytes.
	media bool
	// keys are the store keys of the conversation's state (stateKeys),
	// nil until first asked for.
	keys []string
}

// ledgerEndBytes is how much of the chain names a content end or a
// conversation's start in the store.
const ledgerEndBytes = 16

// estimate returns the estimated tokens up to checkpoint i.
func (p *layout) estimate(i int, ratio float64) float64 {
	if i < 0 {
		return 0
	}
	return float64(p.bytes[i])*ratio + p.fixed[i]
}

// total returns the estimated tokens of the whole prompt.
func (p *layout) total(ratio float64) float64 { return p.estimate(len(p.sums)-1, ratio) }

// ledgerRequest is the part of a generate request that the layout reads.
type ledgerRequest struct {
	Contents []struct {
		Role  string            `json:"role"`
		Parts []json.RawMessage `json:"parts"`
	} `json:"contents"`
	SystemInstruction  json.RawMessage `json:"systemInstruction"`
	SystemInstruction_ json.RawMessage `json:"system_instruction"`
	Tools              json.RawMessage `json:"tools"`
	ToolConfig         json.RawMessage `json:"toolConfig"`
	ToolConfig_        json.RawMessage `json:"tool_config"`
	CachedContent      string          `json:"cachedContent"`
	CachedContent_     string          `json:"cached_content"`
}

// layoutOf lays out a generate request body sent to model. It reads the
// body with layoutScan, and with encoding/json (layoutDecoded) when the
// scanner gives up; both lay out the same (TestLayoutOfReference,
// FuzzLayoutOf). The layout's texts may alias body: a layout must not
// outlive it (the request's, which holds both).
func layoutOf(body []byte, model string) (*layout, error) {
	if p, ok := layoutScan(body, model, nil, ""); ok {
		return p, nil
	}
	return layoutDecoded(body, model)
}

// layoutDecoded is layoutOf with encoding/json.
func layoutDecoded(body []byte, model string) (*layout, error) {
	var req ledgerRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	b := newLayoutBuilder(req.CachedContent != "" || req.CachedContent_ != "", 0)
	b.head(model, firstRaw(req.SystemInstruction, req.SystemInstruction_), req.Tools, firstRaw(req.ToolConfig, req.ToolConfig_))
	for _, c := range req.Contents {
		b.content(c.Role)
		for _, raw := range c.Parts {
			if text, ok := textOnly(raw); ok {
				b.text(unsafe.Slice(unsafe.StringData(text), len(text)))
				continue
			}
			b.other(raw)
		}
	}
	return b.done(), nil
}

// layoutBuilder hashes a prompt's units into its layout's checkpoints.
type layoutBuilder struct {
	p          *layout
	h          hash.Hash
	sum        [sha256.Size]byte
	written    int
	keyed      bool
	bytesSoFar int
	fixedSoFar float64
	// afterText reports that the last unit hashed was a text part, whose
	// end marker is the lead of the next text chunk.
	afterText bool
	// mediaParts counts the media parts so far (layoutMemo).
	mediaParts int
	// exit is the chain's digest when exitOK: a checkpoint (check) or a
	// content laid out from the memo (memoHash.exit) left it, and nothing
	// was written since.
	exit   [sha256.Size]byte
	exitOK bool
}

// textLeads holds the two leads a text chunk can have (layout.leads): 2
// (a text part starts or goes on), after 3 (the previous text part ended
// there). Never written.
var textLeads = [2]byte{3, 2}

// newLayoutBuilder returns a builder whose layout has room for about n
// checkpoints.
func newLayoutBuilder(explicit bool, n int) *layoutBuilder {
	b, _ := builderPool.Get().(*layoutBuilder)
	if b == nil {
		b = &layoutBuilder{h: sha256.New()}
	} else {
		h := b.h
		h.Reset()
		*b = layoutBuilder{h: h}
	}
	p, _ := layoutPool.Get().(*layout)
	if p == nil {
		p = &layout{}
	}
	p.explicit = explicit
	if n > 0 {
		p.sums, p.bytes, p.fixed = slices.Grow(p.sums, n), slices.Grow(p.bytes, n), slices.Grow(p.fixed, n)
		p.leads, p.texts = slices.Grow(p.leads, n), slices.Grow(p.texts, n)
	}
	b.p = p
	return b
}

// builderPool holds the builders of layouts done, with their SHA-256
// state: two allocations a layout.
var builderPool sync.Pool

func (b *layoutBuilder) write(x []byte) {
	b.h.Write(x) //nolint:errcheck // never fails
	b.written += len(x)
	b.exitOK = false
}

func (b *layoutBuilder) mark(c byte) {
	b.sum[0] = c
	b.write(b.sum[:1])
}

// writeCompact writes raw, valid JSON, without insignificant white space
// (as json.Compact), so that a client's formatting does not count as a
// change.
func (b *layoutBuilder) writeCompact(raw []byte) {
	start := 0
	for i := 0; i < len(raw); {
		switch raw[i] {
		case '"':
			s := chunkScanner{b: raw, i: i}
			if _, ok := s.str(); !ok {
				// Not valid JSON (never, from either reader): as it is.
				b.write(raw[start:])
				return
			}
			i = s.i
		case ' ', '\t', '\n', '\r':
			b.write(raw[start:i])
			for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
				i++
			}
			start = i
		default:
			i++
		}
	}
	b.write(raw[start:])
}

// check ends a unit: nbytes and fixed are its own, text and textLead its
// text chunk and lead (nil elsewhere).
func (b *layoutBuilder) check(nbytes int, fixed float64, text []byte, textLead []byte) {
	b.h.Sum(b.sum[:0])
	b.checked(nbytes, fixed, text, textLead)
}

// checked is check once b.sum holds the chain's digest.
func (b *layoutBuilder) checked(nbytes int, fixed float64, text []byte, textLead []byte) {
	p := b.p
	p.leads = append(p.leads, textLead)
	p.texts = append(p.texts, unsafe.String(unsafe.SliceData(text), len(text)))
	b.afterText = false
	b.bytesSoFar += nbytes
	b.fixedSoFar += fixed
	s := b.sum[:]
	// The digest stands for the chain until the next write: the content
	// end after it (entry, content, done) is not summed again (a small
	// request's head and its first content's entry were two of its
	// three SHA-256 finalisations, issue 17).
	b.exit, b.exitOK = b.sum, true
	p.sums = append(p.sums, binary.BigEndian.Uint64(s))
	p.bytes = append(p.bytes, b.bytesSoFar)
	p.fixed = append(p.fixed, b.fixedSoFar)
	if !b.keyed && b.written >= ledgerKeyBytes {
		copy(p.key[:], s)
		b.keyed = true
	}
}

// head hashes the request's head; si, tools and tc are raw JSON, nil when
// absent.
func (b *layoutBuilder) head(model string, si, tools, tc []byte) {
	b.write(unsafe.Slice(unsafe.StringData(model), len(model)))
	b.mark(0)
	b.writeCompact(si)
	b.mark(0)
	b.writeCompact(tools)
	b.mark(0)
	b.writeCompact(tc)
	b.mark(0)
	b.check(len(si)+len(tools)+len(tc), 0, nil, nil)
}

// content starts a content of role.
func (b *layoutBuilder) content(role string) {
	if role == "" {
		role = "user"
	}
	if len(b.p.sums) > 1 {
		var e [ledgerEndBytes]byte
		if b.exitOK {
			copy(e[:], b.exit[:])
		} else {
			copy(e[:], b.h.Sum(b.sum[:0]))
		}
		b.p.ends = append(b.p.ends, e)
	}
	b.contentBody(role)
}

// contentBody is content after the content end: it hashes the role.
func (b *layoutBuilder) contentBody(role string) {
	if role == "" {
		role = "user"
	}
	b.mark(1)
	b.write(unsafe.Slice(unsafe.StringData(role), len(role)))
	b.mark(0)
	b.check(0, 1, nil, nil)
}

// text hashes a text part, in ledgerChunk-byte chunks.
func (b *layoutBuilder) text(text []byte) {
	lead := textLeads[1:]
	if b.afterText {
		lead = textLeads[:]
	}
	for off := 0; off < len(text) || off == 0; off += ledgerChunk {
		chunk := text[off:min(off+ledgerChunk, len(text))]
		b.mark(2)
		b.write(chunk)
		b.check(len(chunk), 0, chunk, lead)
		lead = textLeads[1:]
	}
	b.mark(3)
	b.afterText = true
}

// other hashes a part that is not text alone, raw valid JSON.
func (b *layoutBuilder) other(raw []byte) {
	b.mark(4)
	b.writeCompact(raw)
	b.mark(0)
	if bytes.Contains(raw, []byte(`"inlineData"`)) || bytes.Contains(raw, []byte(`"inline_data"`)) ||
		bytes.Contains(raw, []byte(`"fileData"`)) || bytes.Contains(raw, []byte(`"file_data"`)) {
		b.check(0, ImageTokens, nil, nil)
		b.p.media = true
		b.mediaParts++
		return
	}
	b.check(len(raw), 0, nil, nil)
}

// done returns the layout; b goes back to builderPool and must not be
// used after.
func (b *layoutBuilder) done() *layout {
	p := b.p
	var e [ledgerEndBytes]byte
	if b.exitOK {
		copy(e[:], b.exit[:])
	} else {
		copy(e[:], b.h.Sum(b.sum[:0]))
	}
	if !b.keyed {
		p.key = e
	}
	p.ends = append(p.ends, e)
	b.p = nil
	builderPool.Put(b)
	return p
}

func firstRaw(a, b json.RawMessage) json.RawMessage {
	if len(a) > 0 && string(a) != "null" {
		return a
	}
	if string(b) == "null" {
		return nil
	}
	return b
}

// textOnly returns the text of a part whose only member is text.
func textOnly(raw json.RawMessage) (string, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || len(m) != 1 {
		return "", false
	}
	v, ok := m["text"]
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// sharedIn returns the checkpoint of p up to which it equals a prompt
// whose checkpoint hashes are among sums (the last checkpoint of p whose
// hash is one of them), or -1. It allocates nothing: the last
// sharedProbe checkpoints are compared with sums one by one (a prompt
// that extends the previous one meets its end there), and only a longer
// search goes through a pooled set of sums.
func (p *layout) sharedIn(sums []uint64) int {
	i := len(p.sums) - 1
	for stop := max(i-sharedProbe, -1); i > stop; i-- {
		if slices.Contains(sums, p.sums[i]) {
			return i
		}
	}
	if i < 0 || len(sums) == 0 {
		return -1
	}
	set := sumSetPool.Get().(map[uint64]struct{})
	defer func() {
		clear(set)
		sumSetPool.Put(set)
	}()
	for _, v := range sums {
		set[v] = struct{}{}
	}
	for ; i >= 0; i-- {
		if _, ok := set[p.sums[i]]; ok {
			return i
		}
	}
	return -1
}

// sharedProbe is how many of a layout's last checkpoints sharedIn
// compares one by one before it builds a set.
const sharedProbe = 16

// sumSetPool holds the sets of sharedIn, at most maxLedgerSums entries.
var sumSetPool = sync.Pool{New: func() any { return make(map[uint64]struct{}, maxLedgerSums) }}

// sharedLast returns the checkpoint of p up to which it equals a prompt
// whose last checkpoint hash is last(sums), or -1.
func (p *layout) sharedLast(sums []uint64) int {
	one := [1]uint64{last(sums)}
	return p.sharedIn(one[:])
}

// tail is the end of a prompt inside its last text chunk: the checkpoint
// hash before the chunk (pre) and, for prefixes of the chunk that end on a
// run boundary (ns, longest first, the whole chunk among them), the hash of
// the chunk's lead and that prefix (sums). A flattened transcript is one
// text part that grows, so the previous request ends inside a chunk that
// the next one extends, or rewrites only its end (a closing tag the next
// turn replaces): Gemini caches the text the two share (units, then the
// common prefix inside the first text part that differs), and whole
// chunks alone would miss up to ledgerChunk bytes of it per request.
type tail struct {
	pre  uint64
	ns   []int
	sums []uint64
}

// maxTailSums bounds the prefixes of the last chunk kept in a tail.
const maxTailSums = 32

// tailOf returns the tail of p, or the zero tail when p does not end in a
// text chunk shorter than ledgerChunk (a whole chunk is a checkpoint).
func (p *layout) tailOf() tail {
	i := len(p.sums) - 1
	if i < 1 || p.leads[i] == nil {
		return tail{}
	}
	text := p.text(i)
	if len(text) == 0 || len(text) >= ledgerChunk {
		return tail{}
	}
	t := tail{pre: p.sums[i-1]}
	var ns [maxTailSums]int
	k := 0
	for n := len(text); n > 0 && k < maxTailSums; n-- {
		if n == len(text) || runClass(text[n-1]) != runClass(text[n]) {
			ns[k] = n
			k++
		}
	}
	t.ns = slices.Clone(ns[:k])
	// tailSum of each prefix, the shortest first, with one hash that goes
	// on from the previous prefix.
	t.sums = make([]uint64, len(t.ns))
	h := sha256.New()
	h.Write(p.leads[i]) //nolint:errcheck // never fails
	var sum [sha256.Size]byte
	done := 0
	for k := len(t.ns) - 1; k >= 0; k-- {
		n := t.ns[k]
		h.Write(unsafe.Slice(unsafe.StringData(text[done:n]), n-done)) //nolint:errcheck // never fails
		done = n
		t.sums[k] = binary.BigEndian.Uint64(h.Sum(sum[:0]))
	}
	return t
}

// tailAfter is tailOf, but returns the tail of prev, the state found for
// p, when p is the very prompt prev was saved for (a request sent again):
// its checkpoints as many and its last the same (the chain through the
// same last chunk, as sharedIn compares prompts), so the tail is the same
// and its up to maxTailSums hashes are not taken again. Sampled lists
// (more than maxLedgerSums checkpoints) always go to tailOf.
func (p *layout) tailAfter(prev *ledgerState) tail {
	if prev != nil && len(p.sums) <= maxLedgerSums && len(prev.naive) == len(p.sums) && last(prev.naive) == last(p.sums) {
		return prev.tail
	}
	return p.tailOf()
}

// runClass classes a byte for the run boundaries of tailOf: word bytes
// (letters, digits, and all of UTF-8 beyond ASCII), white space, and other
// ASCII (punctuation and symbols), as tokenizers split text into runs.
func runClass(c byte) int {
	switch {
	case c >= 0x80 || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_':
		return 0
	case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		return 1
	default:
		return 2
	}
}

func tailSum(lead []byte, text string) uint64 {
	h := sha256.New()
	h.Write(lead)         //nolint:errcheck // never fails
	h.Write([]byte(text)) //nolint:errcheck // never fails
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}

// sharedTokens returns the estimated tokens of p's prefix that equals the
// previous prompt of state s: through the last checkpoint they share, or,
// when p continues the text chunk s's prompt ended inside, through that
// prompt's end.
func (p *layout) sharedTokens(s *ledgerState, ratio float64) float64 {
	got := p.estimate(p.sharedIn(s.naive), ratio)
	if len(s.tail.ns) == 0 {
		return got
	}
	for i := 0; i+1 < len(p.sums); i++ {
		if p.sums[i] != s.tail.pre {
			continue
		}
		j := i + 1
		if p.leads[j] == nil {
			break
		}
		t := p.text(j)
		for k, n := range s.tail.ns {
			if len(t) >= n && tailSum(p.leads[j], t[:n]) == s.tail.sums[k] {
				got = max(got, float64(p.bytes[i]+n)*ratio+p.fixed[i])
				break
			}
		}
		break
	}
	return got
}

// ledgerState is what the conversation state keeps of the previous
// request: when it was answered, its position, and of the prompt the
// client sent (naive) and the prompt the proxy sent (sent) the checkpoint
// hashes (at most maxLedgerSums, evenly sampled, always with the last),
// the last hash, and the sent prompt's estimated tokens.
type ledgerState struct {
	at         time.Time
	turn       int
	holdout    bool
	naive      []uint64
	sent       []uint64
	sentTokens float64
	// naiveTokens is the naive prompt's tokens: the response's
	// promptTokenCount plus the tokens the rewrite removed, as the
	// counterfactual counted them; 0 when not known. A next request that
	// extends the whole naive prompt shares that many (sharedTokens).
	naiveTokens float64
	// kept reports that every request of the conversation so far was sent
	// as its rewrite with compact_superseded off would have sent it
	// (compaction.go): only then does that rewrite leave the sent prefix
	// as it was.
	kept bool
	// tail is the naive prompt's end inside its last text chunk.
	tail tail
	// bufs are the arrays of a state from statePool, which its lists
	// use; nil elsewhere.
	bufs *stateBufs
}

const ledgerStateVersion = 4

func (s *ledgerState) encode() []byte {
	// Sized for the whole state, the tail's hashes included, so that it is
	// one allocation (a short prompt's 32 tail hashes grew it three times).
	b := make([]byte, 0, s.encodedMax())
	b = append(b, ledgerStateVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(s.at.UnixMilli()))
	b = binary.AppendUvarint(b, uint64(s.turn))
	b = append(b, flagByte(s.holdout), flagByte(s.kept))
	b = binary.AppendUvarint(b, uint64(math.Round(s.sentTokens)))
	b = binary.AppendUvarint(b, uint64(math.Round(s.naiveTokens)))
	for _, sums := range [][]uint64{s.naive, s.sent} {
		b = binary.AppendUvarint(b, uint64(len(sums)))
		for _, v := range sums {
			b = binary.BigEndian.AppendUint64(b, v)
		}
	}
	b = binary.BigEndian.AppendUint64(b, s.tail.pre)
	b = binary.AppendUvarint(b, uint64(len(s.tail.ns)))
	for k, n := range s.tail.ns {
		b = binary.AppendUvarint(b, uint64(n))
		b = binary.BigEndian.AppendUint64(b, s.tail.sums[k])
	}
	return b
}

// encodedMax bounds the length of s.encode(): the fixed fields, every
// varint at its longest.
func (s *ledgerState) encodedMax() int {
	const varint = binary.MaxVarintLen64
	return 1 + 8 + varint + 2 + 2*varint +
		2*varint + 8*(len(s.naive)+len(s.sent)) +
		8 + varint + len(s.tail.ns)*(varint+8)
}

// flagByte encodes a boolean of the state: 1 for true, 0 for false.
func flagByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

var errLedgerState = errors.New("proxy: malformed ledger state")

func decodeLedgerState(b []byte) (*ledgerState, error) {
	s := &ledgerState{}
	if _, _, err := s.decode(b, nil, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// decode sets s to the state encoded in b. The naive and sent lists and
// the tail's hashes share one array, sums' when it has room (else one
// allocated from the bytes left, each hash being 8 of them), and the
// tail's lengths go to ns's when it has room: no allocation with room,
// two without. It returns the arrays it used. It reads b by index, with
// the one-byte varints inline (uvarintAt): it accepts and rejects what
// binary.Uvarint's loop did (TestLedgerStateReference).
func (s *ledgerState) decode(b []byte, sums []uint64, ns []int) ([]uint64, []int, error) {
	if len(b) < 9 || b[0] != ledgerStateVersion {
		return sums, ns, errLedgerState
	}
	*s = ledgerState{at: time.UnixMilli(int64(binary.BigEndian.Uint64(b[1:9]))), bufs: s.bufs}
	turn, i := uvarintAt(b, 9)
	if i < 0 || turn > math.MaxInt32 || len(b)-i < 2 || b[i] > 1 || b[i+1] > 1 {
		return sums, ns, errLedgerState
	}
	s.turn, s.holdout, s.kept = int(turn), b[i] == 1, b[i+1] == 1
	tokens, i := uvarintAt(b, i+2)
	if i < 0 {
		return sums, ns, errLedgerState
	}
	naiveTokens, i := uvarintAt(b, i)
	if i < 0 {
		return sums, ns, errLedgerState
	}
	s.sentTokens, s.naiveTokens = float64(tokens), float64(naiveTokens)
	if most := min((len(b)-i)/8, 2*maxLedgerSums+maxTailSums); cap(sums) < most {
		sums = make([]uint64, 0, most)
	}
	sums = sums[:0]
	for _, dst := range [...]*[]uint64{&s.naive, &s.sent} {
		n, j := uvarintAt(b, i)
		if j < 0 || n > maxLedgerSums || uint64(len(b)-j) < 8*n {
			return sums, ns, errLedgerState
		}
		from := len(sums)
		// n ≤ (len(b)-j)/8, and the array has room for every hash of
		// the bytes after the header: sums[from:from+n] is within it
		// unless the caller's array was shorter and n exceeds its cap.
		if cap(sums)-from < int(n) {
			sums = slices.Grow(sums, int(n))
		}
		sums = sums[:from+int(n)]
		for k := range sums[from:] {
			sums[from+k] = binary.BigEndian.Uint64(b[j+8*k:])
		}
		i = j + 8*int(n)
		*dst = sums[from:len(sums):len(sums)]
	}
	if len(b)-i < 8 {
		return sums, ns, errLedgerState
	}
	s.tail.pre = binary.BigEndian.Uint64(b[i:])
	count, i := uvarintAt(b, i+8)
	if i < 0 || count > maxTailSums {
		return sums, ns, errLedgerState
	}
	if count == 0 {
		return sums, ns, nil
	}
	if cap(ns) < int(count) {
		ns = make([]int, 0, count)
	}
	tns := ns[:count]
	// The tail's hashes follow the lists in sums' array when it has room
	// (it has when it was sized from b), as append put them.
	var tsums []uint64
	if rest := sums[len(sums):]; cap(rest) >= int(count) {
		tsums = rest[:count]
	} else {
		tsums = make([]uint64, count)
	}
	// uvarintAt by hand: a length is below ledgerChunk, one or two bytes,
	// and the call was most of the loop.
	r := b[i:]
	for k := range tns {
		var n uint64
		switch {
		case len(r) >= 9 && r[0] < 0x80:
			n, r = uint64(r[0]), r[1:]
		case len(r) >= 10 && r[1] < 0x80:
			n, r = uint64(r[0]&0x7f)|uint64(r[1])<<7, r[2:]
		default:
			v, j := uvarintSlow(r, 0)
			if j < 0 || len(r)-j < 8 {
				return sums, ns, errLedgerState
			}
			n, r = v, r[j:]
		}
		if n == 0 || n >= ledgerChunk {
			return sums, ns, errLedgerState
		}
		tns[k], tsums[k] = int(n), binary.BigEndian.Uint64(r)
		r = r[8:]
	}
	s.tail.ns, s.tail.sums = tns, tsums
	return sums, ns, nil
}

// uvarintAt reads the uvarint at b[i:] as binary.Uvarint does and
// returns it with the index after it, or -1 for the index when b holds
// none there (too short, or longer than 64 bits).
func uvarintAt(b []byte, i int) (uint64, int) {
	if i < len(b) && b[i] < 0x80 {
		return uint64(b[i]), i + 1
	}
	return uvarintSlow(b, i)
}

func uvarintSlow(b []byte, i int) (uint64, int) {
	if i > len(b) {
		return 0, -1
	}
	v, n := binary.Uvarint(b[i:])
	if n <= 0 {
		return 0, -1
	}
	return v, i + n
}

// stateBufs are the arrays of a pooled ledgerState (statePool).
type stateBufs struct {
	sums []uint64
	ns   []int
}

// statePool holds the states lookupAt decodes, with their arrays, from
// one request's settle to the next request's lookup.
var statePool = sync.Pool{New: func() any { return &ledgerState{bufs: &stateBufs{}} }}

// decodePooled is decodeLedgerState into a state of statePool, which
// releaseState returns; nil when b is not a state.
func decodePooled(b []byte) *ledgerState {
	s := statePool.Get().(*ledgerState)
	sums, ns, err := s.decode(b, s.bufs.sums, s.bufs.ns)
	// Kept, grown or not, for the next state decoded in s.
	s.bufs.sums, s.bufs.ns = sums[:0], ns[:0]
	if err != nil {
		releaseState(s)
		return nil
	}
	return s
}

// releaseState returns a state of decodePooled to statePool; s and its
// lists must not be used after. Other states are left alone.
func releaseState(s *ledgerState) {
	if s == nil || s.bufs == nil {
		return
	}
	*s = ledgerState{bufs: s.bufs}
	statePool.Put(s)
}

// sampleSums returns at most maxLedgerSums of sums, evenly spaced and ending
// with the last.
func sampleSums(sums []uint64) []uint64 {
	if len(sums) <= maxLedgerSums {
		return sums
	}
	out := make([]uint64, 0, maxLedgerSums)
	stride := (len(sums) + maxLedgerSums - 1) / maxLedgerSums
	for i := len(sums) - 1; i >= 0 && len(out) < maxLedgerSums; i -= stride {
		out = append(out, sums[i])
	}
	// Taken from the end, so that the last is in; stored in order, as
	// last() and the prefix-change check read it
	// (TestSampleSumsKeepsPrefixChanges).
	slices.Reverse(out)
	return out
}

func last(sums []uint64) uint64 {
	if len(sums) == 0 {
		return 0
	}
	return sums[len(sums)-1]
}

// maxLedgerLookups bounds the content ends looked up per request.
const maxLedgerLookups = 8

// lookup finds the state of the conversation p continues: stored under
// the end of its previous request when p extends it (the newest of p's
// content ends that has one), else under p's start. One store call. The
// state is decodePooled's: settle releases it.
func (l *ledger) lookup(tenant string, p *layout) *ledgerState {
	s, _ := l.lookupAt(tenant, p)
	return s
}

// lookupAt is lookup that also returns how many leading contents of p
// the previous request held when its state was found under its end (0
// when found under p's start).
func (l *ledger) lookupAt(tenant string, p *layout) (*ledgerState, int) {
	keys := p.stateKeys()
	vs := l.store.Conversations(tenant, keys)
	for i, v := range vs {
		if v == nil {
			continue
		}
		s := decodePooled(v)
		if s == nil {
			continue
		}
		// The state under p's start may be another conversation's that
		// starts alike (one system prompt for many conversations): it is
		// this conversation's only when p shares at least half its
		// checkpoints with it, as a transcript that grows does.
		if i == len(vs)-1 {
			if 2*(p.sharedIn(s.naive)+1) < len(p.sums) {
				releaseState(s)
				return nil, 0
			}
			return s, 0
		}
		// keys[i] is p.ends[len(p.ends)-1-i], the end of that many + 1
		// contents.
		return s, len(p.ends) - i
	}
	return nil, 0
}

// stateKeys returns the store keys lookupAt asks for p: under the newest
// maxLedgerLookups of its content ends, newest first, then under its
// start. The first and the last are save's. They are made once per layout,
// in one allocation (their slice is the pooled layout's), and kept in
// p.keys.
func (p *layout) stateKeys() []string {
	if len(p.keys) > 0 {
		return p.keys
	}
	const n = len("lg:e:") + 2*ledgerEndBytes
	ends := min(len(p.ends), maxLedgerLookups)
	buf := make([]byte, (ends+1)*n)
	// The slice is the pooled layout's (releaseLayout); the strings are
	// buf's, which is never reused.
	keys := p.keys[:0]
	add := func(prefix string, sum [ledgerEndBytes]byte) {
		b := buf[len(keys)*n : (len(keys)+1)*n]
		copy(b, prefix)
		hexEnd((*[2 * ledgerEndBytes]byte)(b[len(prefix):]), &sum)
		// buf is never written again: the string is immutable.
		keys = append(keys, unsafe.String(&b[0], n))
	}
	for i := len(p.ends) - 1; len(keys) < ends; i-- {
		add("lg:e:", p.ends[i])
	}
	add("lg:k:", p.key)
	p.keys = keys
	return keys
}

// hexEnd writes sum in lower-case hex to dst, as hex.Encode does, a byte
// pair at a time from hexPairs (hex.Encode was 630 of the 800
// instructions of a small request's stateKeys).
func hexEnd(dst *[2 * ledgerEndBytes]byte, sum *[ledgerEndBytes]byte) {
	for i, c := range sum {
		dst[2*i], dst[2*i+1] = hexPairs[2*int(c)], hexPairs[2*int(c)+1]
	}
}

// hexPairs holds the two hex digits of each byte value, in order.
var hexPairs = func() (t [512]byte) {
	const digits = "0123456789abcdef"
	for c := range 256 {
		t[2*c], t[2*c+1] = digits[c>>4], digits[c&15]
	}
	return t
}()

// save stores s as the state of the conversation whose request was p.
func (l *ledger) save(tenant string, p *layout, s *ledgerState) {
	v := s.encode()
	keys := p.stateKeys()
	l.store.SetConversation(tenant, keys[0], v)
	l.store.SetConversation(tenant, keys[len(keys)-1], v)
}

// inHoldout reports whether a conversation that starts with the request
// named end (its content end) goes to the holdout: a keyed hash of the
// tenant and end, read as a number in [0, 1). Later requests inherit the
// decision from the conversation's state.
func (l *ledger) inHoldout(tenant string, end [ledgerEndBytes]byte) bool {
	if l.holdout <= 0 {
		return false
	}
	h := sha256.New()
	h.Write(l.secret)
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	var x [2 * ledgerEndBytes]byte
	hex.Encode(x[:], end[:])
	h.Write(x[:])
	var sum [sha256.Size]byte
	v := binary.BigEndian.Uint64(h.Sum(sum[:0]))
	return float64(v>>11)/(1<<53) < l.holdout
}

// holdoutFor lays out a client body before it is sent and reports whether
// its conversation is in the holdout; the layout and the state found are
// kept for settle.
func (l *ledger) holdoutFor(st *reqState, body []byte) bool {
	if l == nil || l.holdout <= 0 {
		return false
	}
	if st.naive == nil {
		p, err := l.layoutOf(st.tenant, body, st.info.model)
		if err != nil || len(p.ends) == 0 {
			return false
		}
		st.naive, st.prev = p, l.lookup(st.tenant, p)
	}
	p := st.naive
	if st.prev != nil {
		st.holdout = st.prev.holdout
	} else {
		st.holdout = l.inHoldout(st.tenant, p.ends[len(p.ends)-1])
	}
	return st.holdout
}

// settle accounts one answered generate request: it prices the response's
// usage, estimates the counterfactual, records the metrics and stores the
// conversation's new state. removed is the estimated tokens the rewrite
// kept out of the prompt sent.
func (l *ledger) settle(st *reqState, label, model string, u *Usage, removed float64) *Ledger {
	if l == nil || u == nil || st.orig == nil || !st.info.route.isGenerate() || st.mode != metrics.ModeOn ||
		st.upStatus < 200 || st.upStatus > 299 {
		return nil
	}
	price, priced := l.sav.prices[model]
	naive := st.naive
	if naive == nil {
		var err error
		if naive, err = l.layoutOf(st.tenant, st.orig, st.info.model); err != nil {
			return nil
		}
	}
	// The layouts go back to the pool when the request is settled.
	laidOut := st.naive != nil
	st.naive = nil
	defer releaseLayout(naive)
	if naive.explicit || len(naive.ends) == 0 {
		return nil
	}
	sentBody := st.orig
	changed := st.rewritten && !st.fallback
	if changed {
		sentBody = st.sentBody
	}
	// What the proxy sent differs from the client's bytes also when it
	// continued an interaction or named a context cache of its own.
	viaState := (st.ix != nil && st.ix.fallback == "" && st.ix.kind != "" && st.ix.kind != metrics.InteractionFull) || (st.cc != nil && st.cc.use != nil && !st.cc.fellBack)
	changed = changed || viaState
	sent := naive
	if changed && st.rewritten && !st.fallback {
		if p, err := l.layoutOf(st.tenant, sentBody, st.info.model); err == nil {
			sent = p
			defer releaseLayout(p)
		}
	}
	ratio := l.sav.ratioFor(label)
	if rep := st.report; changed && st.rewritten && !st.fallback && rep != nil && !rep.Media &&
		rep.TextBytes+rep.OtherBytes >= minCalibrationBytes && u.PromptTokens > int64(rep.Contents) {
		// The removed text is copies of text the request still holds, so
		// its tokens per byte are this request's own, which the response
		// just measured, rather than the model's average over all traffic.
		ratio = float64(u.PromptTokens-int64(rep.Contents)) / float64(rep.TextBytes+rep.OtherBytes)
		textBytes, imageTokens := textRemoved(rep, ratio)
		removed = float64(textBytes)*ratio + imageTokens
	}
	now := l.now()
	prev := st.prev
	if !laidOut {
		prev = l.lookup(st.tenant, naive)
	}
	// The state found goes back to the pool when the request is settled:
	// the new state's tail may be its, and is encoded before.
	st.prev = nil
	defer releaseState(prev)
	turn := 1
	if prev != nil {
		turn = prev.turn + 1
	}
	// pn is the naive prompt's tokens: what was sent, plus what the
	// rewrite removed.
	pn := float64(u.PromptTokens)
	if changed {
		pn += removed
	}
	next := &ledgerState{at: now, turn: turn, holdout: st.holdout, naive: sampleSums(naive.sums), sent: sampleSums(sent.sums), sentTokens: sent.total(ratio), naiveTokens: pn, tail: naive.tailAfter(prev),
		kept: keptChain(st, prev, viaState)}
	l.save(st.tenant, naive, next)
	if c := st.report; c != nil && c.Compaction != nil && st.rewritten && !st.fallback {
		l.m.CompactionDecisions.WithLabelValues(string(c.Compaction.Reason)).Inc()
	}

	// Prefix changes: the sent prompt no longer starts with the previous
	// sent prompt.
	fresh := prev != nil && now.Sub(prev.at) <= l.window
	if prev != nil && len(prev.sent) > 0 {
		if sent.sharedLast(prev.sent) < 0 {
			reason := metrics.PrefixChangeRewrite
			if naive.sharedLast(prev.naive) < 0 {
				reason = metrics.PrefixChangeClient
			}
			l.m.PrefixChanges.WithLabelValues(reason).Inc()
			if reason == metrics.PrefixChangeRewrite && fresh && prev.sentTokens >= l.minTokens(model) {
				lost := prev.sentTokens - sent.estimate(sent.sharedIn(prev.sent), ratio)
				if lost > 0 {
					l.m.PrefixChangeTokens.Add(lost)
				}
			}
		}
	}
	if !priced {
		return nil
	}
	actual := billed(price, u)
	counterfactual := actual
	if changed {
		kn := 0.0
		if fresh {
			if total := naive.total(ratio); total > 0 {
				kn = pn * naive.sharedTokens(prev, ratio) / total
			}
			if naive.media && prev.naiveTokens > 0 && len(prev.naive) > 0 && naive.sharedLast(prev.naive) >= 0 {
				// A prompt with media that extends the whole previous
				// prompt: the cache holds that prompt's own count, which
				// the previous response measured (plus what its rewrite
				// removed), rather than a share of this one's estimate,
				// whose tokens per byte is the traffic's, not this
				// prompt's (on the bench's images session the share came
				// out 1% high, a tenth of the net saving). A text prompt
				// keeps the share at its own tokens per byte, whose error
				// cancels against its total's.
				kn = prev.naiveTokens
			}
			if kn < l.minTokens(model) {
				kn = 0
			}
		}
		kn = min(kn, pn)
		ka := float64(min(u.CachedTokens, u.PromptTokens))
		counterfactual = actual + ((pn-kn)-float64(u.PromptTokens-int64(ka)))*price.Input/1e6 + (kn-ka)*price.CachedInput/1e6
		// Both series exist once a model has a changed request, so that
		// their difference has a value (the alert on a negative net
		// saving).
		d := counterfactual - actual
		c := l.modelChildren.get(label, func() ledgerModelCounters {
			return ledgerModelCounters{saved: l.m.SavedDollars.WithLabelValues(label), increase: l.m.CostIncreaseDollars.WithLabelValues(label)}
		})
		c.saved.Add(max(d, 0))
		c.increase.Add(max(-d, 0))
	}
	group := metrics.GroupTreated
	if st.holdout {
		group = metrics.GroupHoldout
	}
	tl := metrics.LedgerTurn(turn)
	c := l.turnChildren.get(labelPair{group, tl}, func() ledgerTurnCounters {
		return ledgerTurnCounters{
			requests:       l.m.LedgerRequests.WithLabelValues(group, tl),
			billed:         l.m.LedgerBilledDollars.WithLabelValues(group, tl),
			squares:        l.m.LedgerBilledSquares.WithLabelValues(group, tl),
			counterfactual: l.m.LedgerCounterfactual.WithLabelValues(group, tl),
		}
	})
	c.requests.Inc()
	c.billed.Add(actual)
	c.squares.Add(actual * actual)
	c.counterfactual.Add(counterfactual)
	st.led = Ledger{Counterfactual: counterfactual, Billed: actual, Turn: turn, Holdout: st.holdout}
	return &st.led
}

// Ledger is the ledger's account of one generate request (Exchange.Ledger).
type Ledger struct {
	// Counterfactual is the estimated US dollars Gemini would have billed
	// for the client's own request, with implicit caching; Billed is the
	// bill of what was sent, from usageMetadata. Counterfactual − Billed
	// is the request's net saving.
	Counterfactual, Billed float64
	// Turn is the request's position in its conversation, from 1.
	Turn int
	// Holdout reports that the conversation is in the holdout and was sent
	// unrewritten.
	Holdout bool
}

// billed returns the US dollars of one response's usage at price.
func billed(p Price, u *Usage) float64 {
	uncached := max(u.PromptTokens-u.CachedTokens, 0)
	return (float64(uncached+u.ToolUsePromptTokens)*p.Input +
		float64(min(u.CachedTokens, u.PromptTokens))*p.CachedInput +
		float64(u.CandidatesTokens+u.ThoughtsTokens)*p.Output) / 1e6
}

// priceByVersion reports whether a response is attributed and priced by
// its modelVersion instead of the path's model: when the path names no
// model, an alias (gemini-flash-latest), or a model without a price, and
// modelVersion names a priced model (issue 19).
func (h *Handler) priceByVersion(pathModel, version string) bool {
	if version == "" {
		return false
	}
	if pathModel == "" {
		return true
	}
	if _, ok := h.sav.prices[pathModel]; ok && !strings.HasSuffix(pathModel, "-latest") {
		return false
	}
	_, ok := h.sav.prices[normalizeModel(version)]
	return ok
}

// localStore is a bounded in-process InteractionStore: the oldest key
// goes when it is full. Safe for concurrent use. Keys are the tenant and
// the key as a pair, which a lookup or a write of a key held makes
// without allocating (a "tenant\x00key" string was two concatenations a
// lookup and a write: 2k instructions of settle's request).
type localStore struct {
	mu    sync.Mutex
	max   int
	m     map[localKey][]byte
	order []localKey
}

type localKey struct{ tenant, key string }

func newLocalStore(n int) *localStore { return &localStore{max: n, m: make(map[localKey][]byte)} }

func (s *localStore) Conversations(tenant string, keys []string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = s.m[localKey{tenant, k}]
	}
	return out
}

func (s *localStore) SetConversation(tenant, key string, value []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := localKey{tenant, key}
	if _, ok := s.m[k]; !ok {
		s.order = append(s.order, k)
		if len(s.order) > s.max {
			delete(s.m, s.order[0])
			s.order = s.order[1:]
		}
	}
	s.m[k] = value
	return true
}

// TenantOfKey returns the tenant id of requests that carry apiKey (and no
// trusted tenant header) under secret, Options.TenantSecret: what
// Exchange.Tenant holds for them.
func TenantOfKey(secret []byte, apiKey string) string {
	return tenantID(secret, tenantKey{"key:", apiKey})
}

// keptChain reports whether the conversation's sent prompts, st's
// included, were each what the rewrite with compact_superseded off would
// have sent (ledgerState.kept): the rewrite's output not compacted went
// out, or the client's own bytes where the rewrite changed nothing, and
// no interaction or context cache stood for a prefix. A request whose
// state was not found starts a chain.
func keptChain(st *reqState, prev *ledgerState, viaState bool) bool {
	if prev != nil && !prev.kept || st.report == nil || st.report.Compacted() || viaState {
		return false
	}
	return st.rewritten && !st.fallback || !st.report.Changed()
}

// rewriteWeighed rewrites a client body. When the rewrite compacted
// (Report.Compacted) and sentPrefix finds what the conversation's previous
// request sent, it rewrites the body again with that as Options.Sent, so
// that compaction weighs the cached prefix it would break: a request that
// compacts nothing, most of them, costs no layout or state lookup before
// it is sent.
func (h *Handler) rewriteWeighed(st *reqState, body []byte) ([]byte, *rewrite.Report, error) {
	out, rep, err := h.runRewrite(st, body, nil)
	if err != nil || !rep.Compacted() {
		return out, rep, err
	}
	sent := h.ledger.sentPrefix(st, body, h.rwOpts.CompactSuperseded)
	if sent == nil {
		return out, rep, err
	}
	if out2, rep2, err2 := h.runRewrite(st, body, sent); err2 == nil {
		return out2, rep2, nil
	}
	return out, rep, err
}

// sentPrefix returns rewrite.Options.Sent for a client body about to be
// rewritten with compaction on (compact), or nil: with
// LedgerOptions.WeighCompaction, for a priced model, when the body
// extends the previous request of its conversation by whole contents,
// that request was answered within the implicit cache's window, its sent
// prompt reached the model's implicit-cache minimum, and every request of
// the conversation so far went out as the rewrite with compaction off
// would have sent it (ledgerState.kept). It lays out the body and looks
// its conversation up once, for holdoutFor and settle too.
func (l *ledger) sentPrefix(st *reqState, body []byte, compact bool) *rewrite.SentPrefix {
	if l == nil || !l.weigh || !compact || st.orig == nil {
		return nil
	}
	price, ok := l.sav.prices[st.info.model]
	if !ok || price.Input <= 0 {
		return nil
	}
	p, err := l.layoutOf(st.tenant, body, st.info.model)
	if err != nil || len(p.ends) == 0 || p.explicit {
		return nil
	}
	prev, k := l.lookupAt(st.tenant, p)
	st.naive, st.prev = p, prev
	if prev == nil || k == 0 || !prev.kept || prev.holdout || l.now().Sub(prev.at) > l.window || prev.sentTokens < l.minTokens(st.info.model) {
		return nil
	}
	return &rewrite.SentPrefix{Contents: k, CachedRatio: price.CachedInput / price.Input}
}
