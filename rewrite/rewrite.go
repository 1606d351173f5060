package rewrite

import (
	"encoding/base64"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

// Request rewrites a generateContent request body. It returns the new body
// and a report; on any error the caller forwards the original body. Request
// is pure and safe for concurrent use; body is never modified, and when
// nothing changes the returned slice is body itself.
//
// When v also implements Memo, Request reads and stores the analysis of
// each turn there, so that the turns a conversation re-sends are not
// analysed again (pass one object per tenant that implements both). The
// memo only saves work: the output is byte for byte the same with or
// without it, whatever it returns.
func Request(body []byte, opts Options, v Verifier) ([]byte, *Report, error) {
	return request1(body, opts, v, true)
}

// request1 is Request; fast enables the path for requests whose texts are
// all too short to hold a replaceable block and the other shortcuts (see
// engine.exhaustive), which tests turn off to check that they change
// nothing.
func request1(body []byte, opts Options, v Verifier, fast bool) ([]byte, *Report, error) {
	st := states.Get().(*state)
	defer st.release()
	return st.rewrite(body, opts, v, fast)
}

// rewrite is request1 with the buffers of st.
func (st *state) rewrite(body []byte, opts Options, v Verifier, fast bool) ([]byte, *Report, error) {
	st.scanned, st.steps = 0, 0
	// A request whose texts are all shorter than MinBlockBytes (and that
	// has no inlineData part) is never changed and lists no blocks: the
	// scan then only validates and measures its texts.
	small := 0
	if fast && opts.MinBlockBytes > 0 {
		small = opts.MinBlockBytes
	}
	req, err := scanWith(body, st, small, limitsOf(&opts))
	if err != nil {
		return nil, nil, err
	}
	rep := &Report{BytesBefore: len(body)}
	if len(req.contents) > 0 {
		c := req.contents[0].obj
		rep.conv.set(body[c.start:c.end])
		rep.hasConv = true
	}
	var uf *auditUnflat
	if opts.Unflatten == UnflattenVerified && v != nil {
		if nb, turns, removed, tokens, rec := unflattenRequest(body, req, &opts, v); turns > 0 {
			rep.UnflattenedTurns, rep.UnflattenedBytes, rep.UnflattenedTokens = turns, removed, tokens
			body, uf = nb, rec
			if req, err = scanWith(body, st, small, limitsOf(&opts)); err != nil {
				return nil, nil, err
			}
		}
	}
	if req.small {
		// No block reaches MinBlockBytes: nothing to replace and no block
		// of the new turn to list.
		rep.BytesAfter = len(body)
		req.describe(rep)
		if uf != nil {
			rep.aud = &auditRec{uf: uf}
		}
		return body, rep, nil
	}
	e := newEngine(body, req, &opts, st)
	e.exhaustive = !fast
	if m, ok := v.(Memo); ok {
		e.memo = m
	}
	if err := e.analyse(); err != nil {
		return nil, nil, err
	}
	if opts.Sent != nil && opts.CompactSuperseded && uf == nil {
		rep.Compaction = e.weigh(*opts.Sent)
	}
	reps := e.coalesce(e.final())
	rep.compacted = compacted(reps)
	out := e.emit(reps)
	var splits []auditSplit
	if opts.StablePrefix {
		out, rep.Reordered, splits = e.stabilise(out, reps)
	}
	if uf != nil || len(reps) > 0 || len(splits) > 0 {
		rep.aud = &auditRec{uf: uf, cuts: e.auditCuts(reps), splits: splits}
		if len(reps) > 0 {
			rep.aud.body = e.body
		}
	}
	rep.Replacements = e.report(reps)
	rep.subText, rep.subOther = e.subSizes(reps, rep.Replacements)
	rep.BytesAfter = len(out)
	e.req.describe(rep)
	rep.Blocks = e.newTurnBlocks()
	// Keep the engine's slices for the next request, without the strings
	// they hold (an image's decoded bytes may be large).
	clear(e.parts)
	clear(e.occs)
	st.tparts, st.occs = e.parts[:0], e.occs[:0]
	st.docPtrs, st.byText = e.docs, e.byText[:0] // docPtrs is cleared by release
	return out, rep, nil
}

// state holds the buffers of one Request call. States are pooled so that a
// request reuses the decoding arena of an earlier one instead of allocating
// (and later collecting) a copy of its body; nothing in a returned body or
// Report refers to them, so no output depends on the pool.
type state struct {
	arena []byte  // decoded texts (scanner.arena)
	nls   []int32 // their line ends (scanner.nls)
	marks []mark  // their offset marks (scanner.marks)
	at    anchors // the scan's index of re-sent blocks (scanner.at)
	// contents and parts are the request's contents and their parts
	// (request.contents, scanner.parts).
	contents []content
	parts    []part
	blocks   []block   // the blocks of every part, back to back
	segs     []segMark // their segmentation marks, back to back (segReuse)
	segIdx   segIndex  // the fence and tag steps of the texts segmented (segmenter.idx)
	// copyOf holds, for each of blocks, the block it was copied from by
	// segReuse (-1: none), and occOf the occurrence made of it.
	copyOf, occOf []int32
	tparts        []textPart
	occs          []occ
	// The buffers of findRuns: per-line flags, free-line flags per part,
	// free-line hashes and where each part's end, and the hash table.
	slab    []bool
	free    [][]bool
	hashes  []lineHash
	hashEnd []int
	tbl     lineTable
	// The engine's identity maps and documents, cleared after each
	// request (engine.ids, versions, byText, byName, shas, docs), and
	// the raw offsets of blocks (rawBlock).
	ids      map[string]int32
	versions map[verKey]int
	byText   []int32
	byName   map[string]int
	shas     shaSums           // engine.sha's memo
	shaSpans map[shaKey]string // spanSHA's memo
	rawMemo  map[*occ]rawMapped
	docs     []doc
	docPtrs  []*doc
	reps     []*occ
	cuts     []cut
	// scanned counts the bytes that the identity tests of the last request
	// read (retrieval-chunk searches, line sets and their similarities):
	// a measure of work that tests compare across input sizes, which,
	// unlike time, does not depend on the machine's load.
	scanned int
	// steps counts the segmentation's work in the last request, as
	// scanned does the identity tests' (segmenter.steps).
	steps int
	// noPlainHint turns off textStr's copy of the ordinary bytes that
	// shortText found (scanner.plainTo): tests compare with it.
	noPlainHint bool
}

// flags returns n false flags.
func (st *state) flags(n int) []bool {
	if cap(st.slab) < n {
		st.slab = make([]bool, n)
		return st.slab
	}
	s := st.slab[:n]
	clear(s)
	return s
}

// table returns an empty lineTable for at least n keys.
func (st *state) table(n int) *lineTable {
	size := 16
	for size < 2*n {
		size *= 2
	}
	t := &st.tbl
	if cap(t.keys) < size {
		t.keys, t.vals = make([]uint64, size), make([]loc, size)
	} else {
		t.keys, t.vals = t.keys[:size], t.vals[:size]
		clear(t.vals)
	}
	t.mask = uint64(size - 1)
	return t
}

// maxPooled bounds the arena a pooled state keeps, so that one huge request
// does not pin its size in memory.
const maxPooled = 16 << 20

// maxPooledKeys bounds the entries of a map, and the documents, that a
// pooled state keeps.
const maxPooledKeys = 1 << 12

var states = sync.Pool{New: func() any { return new(state) }}

// release returns st to the pool.
func (st *state) release() {
	st.reset()
	states.Put(st)
}

// reset drops what st holds of the last request, and the buffers that grew
// too large to keep.
func (st *state) reset() {
	if cap(st.arena) > maxPooled {
		st.arena, st.nls, st.marks = nil, nil, nil
	}
	if cap(st.parts) > maxPooled/int(unsafe.Sizeof(part{})) {
		st.contents, st.parts = nil, nil
	}
	if cap(st.tparts) > maxPooled/int(unsafe.Sizeof(textPart{})) || cap(st.occs) > maxPooled/int(unsafe.Sizeof(occ{})) {
		st.tparts, st.occs = nil, nil
	}
	st.blocks, st.segs, st.copyOf, st.occOf = st.blocks[:0], st.segs[:0], st.copyOf[:0], st.occOf[:0]
	st.segIdx.reset()
	if cap(st.blocks) > maxPooled/int(unsafe.Sizeof(block{})) || cap(st.segs) > maxPooled/int(unsafe.Sizeof(segMark{})) || cap(st.copyOf) > maxPooled/4 {
		st.blocks, st.segs, st.copyOf, st.occOf = nil, nil, nil, nil
	}
	if cap(st.slab) > maxPooled || cap(st.tbl.keys) > maxPooled/16 {
		st.slab, st.free, st.hashes, st.hashEnd, st.tbl = nil, nil, nil, nil, lineTable{}
	}
	// Drop the references the pooled slices hold. Each is cleared up to
	// its length after every request, so nothing past it is set; clearing
	// no more keeps the write barriers of a collection in progress few.
	clear(st.free)
	// Maps keep their size when cleared: drop the large ones, so that a
	// small request does not pay for clearing what a huge one left.
	if len(st.ids) > maxPooledKeys || len(st.versions) > maxPooledKeys {
		st.ids, st.versions = nil, nil
	}
	clear(st.ids)
	clear(st.versions)
	if len(st.byName) > maxPooledKeys {
		st.byName = nil
	}
	clear(st.byName)
	st.shas.reset()
	if len(st.shaSpans) > maxPooledKeys {
		st.shaSpans = nil
	}
	clear(st.shaSpans)
	if len(st.rawMemo) > maxPooledKeys {
		st.rawMemo = nil
	}
	clear(st.rawMemo)
	if cap(st.byText) > maxPooledKeys {
		st.byText = nil
	}
	if cap(st.docs) > maxPooledKeys {
		st.docs, st.docPtrs = nil, nil
	}
	clear(st.docs)
	clear(st.docPtrs)
	clear(st.reps)
	clear(st.cuts)
	st.free, st.docs, st.docPtrs, st.reps, st.cuts = st.free[:0], st.docs[:0], st.docPtrs[:0], st.reps[:0], st.cuts[:0]
}

// textPart is one analysable text part.
type textPart struct {
	turn, part int
	p          *part
	text       string
	marks      []mark // unescaped → raw offsets, when the string has escapes
	lines      lines
	blocks     []block
	blockOff   int    // blocks[0] is state.blocks[blockOff]; -1: not there
	gone       []bool // lines replaced by a run reference
	// val locates a sub-text, a string value analysed as a text of its
	// own (jsontext.go); nil for a text part analysed as one text.
	val *jsonVal
}

// occ is one occurrence of a block in the request.
type occ struct {
	tp      int // index into engine.parts; -1 for an image
	turn    int
	part    int
	b       block
	content string // identity content: the block's content with CRLF → LF
	cid     int32  // content's id: equal ids, equal contents (engine.ids)
	// copyOf is one plus the index of the occurrence whose block segReuse
	// copied as this one's (the same span and content); 0 for none.
	copyOf int32
	doc    int
	next   int32 // the document's next occurrence; -1 for none
	// decision
	replace bool
	rule    Rule
	target  int  // turn holding the full copy
	later   bool // the full copy comes after o
	super   bool // o is an older version (superseded reference)
	img     *part
	// lead is the caption or lead-in line right above the block and open
	// its opening tag, for identity (see leadIn); both "" when none.
	lead, open string
	// active marks the occurrence of an active version of its document
	// that may keep its full text, pinned one in the newest user turn
	// (see decide).
	active, pinned bool
	// chunked marks the first occurrence of a version of a named document
	// that a later block of the name was taken as a retrieval chunk of
	// (identity.go, chunkedAgainst): it is never superseded.
	chunked  bool
	sha      string
	ref      string
	refEsc   bool   // ref holds a byte that JSON escapes (set with ref)
	refName  string // the name inside ref, when refText made it
	refBytes int
	from     loc // a run: the part and line where its earlier copy starts
	// tgt is the index into engine.occs of the occurrence holding the
	// full copy (set with target by decide), and merged marks a
	// reference made by coalesce, whose copy starts at from (audit.go).
	tgt    int32
	merged bool
	// sumRaw is the raw span of engine.body whose decoding sha is the
	// SHA-256 of, set with sha by reference: the audit's memo (audit.go).
	sumRaw span
}

// doc is one document: every block that is a version of the same file.
type doc struct {
	name string
	kind blockKind
	// first and last are the document's first and last occurrences
	// (indices into engine.occs), linked in request order by occ.next.
	first, last int32
	latest      string
	latestID    int32    // latest's content id; -1 before the first occurrence
	set         []uint64 // lineSet(latest), computed lazily
	hasSet      bool
	id          int32 // index into engine.docs
	// leads and opens are the distinct lead-in lines of the document's
	// occurrences in user turns and the opening tags of its tag
	// occurrences, at most maxLeads each; overLeads and overOpens are set
	// when more were seen. They are the captions that tell two documents
	// apart (identity.go).
	leads, opens         []string
	overLeads, overOpens bool
	// evLeads are the leads of the occurrences in turns that hold no copy
	// (turnCensus.copies): only those are evidence, since in the output a
	// copy's lead-in may stand above a reference line, which belongs to
	// no document.
	evLeads []string
	overEv  bool
	// split is set when the newest user turn holds an older version of
	// the document (see decide).
	split bool
}

// maxLeads bounds the captions a document remembers; one that has seen
// more takes any caption it does not hold as a different one.
const maxLeads = 4

// verKey names one version of a document: the document and a content id.
type verKey struct{ doc, cid int32 }

type engine struct {
	body   []byte
	req    *request
	opts   *Options
	parts  []textPart
	occs   []occ
	docs   []*doc
	runs   []occ
	memo   Memo // nil: analyse every turn
	st     *state
	byName map[string]int
	// ids numbers the distinct contents, so that each content is hashed
	// once and the maps below are keyed by small integers.
	ids      map[string]int32
	byText   []int32        // content id → document; -1 for none
	versions map[verKey]int // a document's version → its first occurrence
	strs     []byte         // the Report's strings (see str)
	// chunkScan is what is left of the bytes that the retrieval-chunk
	// test of a named block may still scan (see identify).
	chunkScan int
	// exhaustive turns off the shortcuts that must change nothing (the
	// segmentation reuse, the run pre-test), for tests to compare.
	exhaustive bool
	// newest is the index of the newest user turn (-1: none), nothing of
	// which is ever superseded.
	newest int
	// turns is the turn census, once an identity test needs it.
	turns turnCensus
	// labels caches holdsLabel by content id, then by part: 1 yes, -1
	// no, 0 not known.
	labels []int8
}

// newEngine returns an engine for req that keeps its maps and documents in
// st (a zero state works).
func newEngine(body []byte, req *request, opts *Options, st *state) *engine {
	if opts.MinBlockBytes < 0 {
		opts.MinBlockBytes = 0
	}
	if st.byName == nil {
		st.byName = map[string]int{}
	}
	return &engine{body: body, req: req, opts: opts, st: st, byName: st.byName, docs: st.docPtrs[:0], chunkScan: chunkScanFactor * len(body)}
}

// role returns the effective role of turn i.
func (e *engine) role(i int) string {
	if r := e.req.contents[i].role; r != "" {
		return r
	}
	return "user"
}

func (e *engine) analyse() error {
	tags := e.opts.DocumentTags
	n := 0
	for ti := range e.req.contents {
		n += len(e.req.contents[ti].parts)
	}
	e.parts = slices.Grow(e.st.tparts[:0], n)
	e.occs = slices.Grow(e.st.occs[:0], n)
	// Sized once for about one block per part, so that they rarely grow;
	// kept in the state between requests.
	if e.st.ids == nil {
		e.st.ids = make(map[string]int32, n)
		e.st.versions = make(map[verKey]int, n)
	}
	e.ids, e.versions, e.byText = e.st.ids, e.st.versions, e.st.byText[:0]
	var tm *turnMemo
	if e.memo != nil {
		tm = newTurnMemo(e.memo, e.body, e.req, e.opts)
	}
	var texts []string
	var found [][]block
	sr := segReuse{off: e.exhaustive, limited: e.opts.MaxBlocks > 0}
	e.st.segIdx.arena, e.st.segIdx.copies = e.st.arena, e.st.at.copies
	// Options.MaxBlocks, counted as the texts are segmented: each block
	// costs about a kilobyte of records once it is an occurrence (below),
	// so a request over the limit stops before any of them exists, and
	// before its blocks are stored in the memo.
	nb, maxBlocks := 0, e.opts.MaxBlocks
	if maxBlocks <= 0 {
		maxBlocks = math.MaxInt
	}
	for ti := range e.req.contents {
		c := &e.req.contents[ti]
		var memoed [][]block
		hit := false
		if tm != nil && !e.hasSubTexts(c) {
			texts = texts[:0]
			for pi := range c.parts {
				if p := &c.parts[pi]; p.kind == partText {
					texts = append(texts, p.dec.text)
				}
			}
			memoed, hit = tm.get(ti, texts)
		}
		first := len(e.parts)
		for pi := range c.parts {
			p := &c.parts[pi]
			if sub, err := e.addSubTexts(ti, pi, p, &sr, &nb, maxBlocks); sub || err != nil {
				if err != nil {
					return err
				}
				continue
			}
			switch p.kind {
			case partText:
				d := &p.dec
				ls := lines{text: d.text, nl: d.nl}
				var blocks []block
				off := -1
				if hit {
					blocks = memoed[len(e.parts)-first]
				} else {
					off = len(e.st.blocks)
					sr.left = maxBlocks - nb
					sr.segment(e.st, ls, tags)
					blocks = e.st.blocks[off:len(e.st.blocks):len(e.st.blocks)]
				}
				if nb += len(blocks); nb > maxBlocks {
					return ErrTooComplex
				}
				e.parts = append(e.parts, textPart{turn: ti, part: pi, p: p, text: d.text, marks: d.marks, lines: ls, blocks: blocks, blockOff: off})
				if err := e.addFenceTexts(&sr, &nb, maxBlocks); err != nil {
					return err
				}
			}
		}
		if tm != nil && !hit && !e.hasSubTexts(c) {
			found = found[:0]
			for _, tp := range e.parts[first:] {
				found = append(found, tp.blocks)
			}
			tm.set(ti, texts, found)
		}
	}
	e.findRuns()
	e.newest = -1
	for ti := len(e.req.contents) - 1; ti >= 0; ti-- {
		if e.role(ti) == "user" {
			e.newest = ti
			break
		}
	}
	// Occurrences in request order: parts in order, blocks in order, images
	// interleaved by their position. A block that segReuse copied has the
	// content of the block it copied: its occurrence shares that string
	// and content id instead of normalising and hashing it again.
	st := e.st
	st.occOf = slices.Grow(st.occOf[:0], len(st.blocks))[:len(st.blocks)]
	k := 0
	for ti := range e.req.contents {
		c := &e.req.contents[ti]
		for pi := range c.parts {
			p := &c.parts[pi]
			if p.kind == partInline {
				if data, ok := decodeBase64(e.body[p.str.start:p.str.end], p.esc); ok {
					e.add(occ{tp: -1, turn: ti, part: pi, b: block{kind: kindImage, name: p.mime}, content: data, img: p, cid: -1})
				}
				continue
			}
			// A text part is one text, or (jsontext.go) none or several
			// sub-texts; so is a tool result.
			for ; k < len(e.parts) && e.parts[k].turn == ti && e.parts[k].part == pi; k++ {
				tp := &e.parts[k]
				for j, b := range tp.blocks {
					if b.box {
						continue // analysed by its values (jsontext.go)
					}
					o := occ{tp: k, turn: ti, part: pi, b: b, cid: -1, lead: subLead(tp, j)}
					if b.kind == kindTag {
						o.open = strings.TrimSpace(tp.text[b.start:b.cstart])
					}
					if tp.blockOff >= 0 {
						if src := st.copyOf[tp.blockOff+j]; src >= 0 {
							q := &e.occs[st.occOf[src]]
							o.content, o.cid, o.copyOf = q.content, q.cid, st.occOf[src]+1
						}
					}
					if o.cid < 0 {
						o.content = normalize(tp.text[b.cstart:b.cend])
					}
					e.add(o)
					if tp.blockOff >= 0 {
						st.occOf[tp.blockOff+j] = int32(len(e.occs) - 1)
					}
				}
			}
		}
	}
	for i := range e.occs {
		e.place(i)
	}
	e.decide()
	return nil
}

// normalize returns s with CRLF line endings turned into LF, for comparison
// only.
func normalize(s string) string {
	if strings.IndexByte(s, '\r') < 0 {
		return s
	}
	return strings.TrimSuffix(strings.ReplaceAll(s, "\r\n", "\n"), "\r")
}

// decodeBase64 decodes standard or URL-safe base64, padded or not.
func decodeBase64(raw []byte, esc bool) (string, bool) {
	s := string(raw)
	if esc {
		s = unescape(raw)
	}
	s = strings.TrimRight(s, "=")
	enc := base64.RawStdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.RawURLEncoding
	}
	b, err := enc.DecodeString(s)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// add appends an occurrence, with the id of its content; o.cid is that id
// when known, else -1. Its document is assigned later (place), once every
// occurrence is known.
func (e *engine) add(o occ) {
	if o.cid < 0 {
		id, ok := e.ids[o.content]
		if !ok {
			id = int32(len(e.ids))
			e.ids[o.content] = id
			e.byText = append(e.byText, -1)
		}
		o.cid = id
	}
	o.next = -1
	e.occs = append(e.occs, o)
}

// place assigns occurrence idx to a document (DESIGN §3 "Identity"),
// after the occurrences before it.
func (e *engine) place(idx int) {
	o := &e.occs[idx]
	o.doc = e.identify(o)
	d := e.docs[o.doc]
	if d.first < 0 {
		d.first = int32(idx)
	} else {
		e.occs[d.last].next = int32(idx)
	}
	d.last = int32(idx)
	if _, ok := e.versions[verKey{d.id, o.cid}]; !ok {
		e.versions[verKey{d.id, o.cid}] = idx
		if o.b.kind != kindImage && !o.b.kind.secondary() && o.b.kind != kindTool {
			if e.byText[o.cid] < 0 {
				e.byText[o.cid] = int32(o.doc)
			}
		}
	}
	if d.latestID != o.cid {
		d.latest, d.latestID, d.hasSet, d.set = o.content, o.cid, false, nil
	}
	if o.lead != "" && e.role(o.turn) == "user" {
		d.leads = remember(d.leads, o.lead, &d.overLeads)
		if !e.census().copies[o.turn] || e.soleValue(o) {
			d.evLeads = remember(d.evLeads, o.lead, &d.overEv)
		}
	}
	if o.open != "" {
		d.opens = remember(d.opens, o.open, &d.overOpens)
	}
}

func (e *engine) newDoc(name string, kind blockKind) int {
	// Documents live in the state's slab; when it is full a new one is
	// started (the documents in the old one stay where they are).
	st := e.st
	if len(st.docs) == cap(st.docs) {
		st.docs = make([]doc, 0, max(16, 2*cap(st.docs)))
	}
	st.docs = append(st.docs, doc{name: name, kind: kind, latestID: -1, id: int32(len(e.docs)), first: -1, last: -1})
	e.docs = append(e.docs, &st.docs[len(st.docs)-1])
	return len(e.docs) - 1
}

// chunkScanFactor bounds the bytes that the retrieval-chunk tests of named
// blocks scan in one request, as a multiple of the body size.
const chunkScanFactor = 8

// maxCandidates bounds the documents an unnamed block is compared with.
const maxCandidates = 64

// chunk is chunk(a, b), counting the bytes it may read in e.st.scanned.
func (e *engine) chunk(a, b string) int {
	e.st.scanned += len(a) + len(b)
	return chunk(a, b)
}

// chunk reports whether b is a retrieval chunk of a (-1), a is a chunk of b
// (1), or neither (0): one is a strict substring of the other and less than
// half its size. A file edited by one line is never a chunk.
func chunk(a, b string) int {
	switch {
	case len(b)*2 < len(a) && strings.Contains(a, b):
		return -1
	case len(a)*2 < len(b) && strings.Contains(b, a):
		return 1
	}
	return 0
}

func cleanName(n string) string {
	n = strings.ReplaceAll(strings.TrimSpace(n), `\`, "/")
	for strings.HasPrefix(n, "./") {
		n = n[2:]
	}
	return n
}

// firstLine returns the first non-blank line of s, trimmed.
func firstLine(s string) string {
	for s != "" {
		line := s
		if k := strings.IndexByte(s, '\n'); k >= 0 {
			line, s = s[:k], s[k+1:]
		} else {
			s = ""
		}
		if t := strings.TrimSpace(line); t != "" {
			return t
		}
	}
	return ""
}

// segReuse segments the texts of one request into st.blocks, starting
// each text where the segmentation of a recent text with the same first
// bytes leaves off (a file re-sent ahead of a new question): the blocks
// before the last segMark inside the shared prefix are copied, not found
// again. Inside a text, a fence or tag step at a line where an earlier
// text found a block copies that text's blocks from there the same way
// (st.segIdx, segmenter.reuseAt: a file re-sent after other text). The
// blocks are exactly those of a fresh segmentation (segMark).
type segReuse struct {
	recent  [4]segText
	nrecent int
	off     bool // segment every text afresh
	// When limited, left is how many more blocks the request may have
	// (Options.MaxBlocks); segmentation stops one past it.
	limited bool
	left    int
}

// segText is a text segmented earlier: its lines, and its blocks and
// marks in st.blocks and st.segs.
type segText struct {
	l                            lines
	blockOff, markOff, markCount int
}

// segment appends the blocks of the text l to st.blocks and returns the
// mark it resumed at (the zero mark: none).
func (sr *segReuse) segment(st *state, l lines, tags []string) segMark {
	if len(l.text) < 8 {
		return segMark{}
	}
	var from segMark
	var src *segText
	shared := 0
	// Newest first. Only the bytes up to the line of a text's last mark
	// matter, and a text sharing all of them gives all its blocks: stop
	// there.
	for j := range min(sr.nrecent, len(sr.recent)) {
		r := &sr.recent[(sr.nrecent-1-j)%len(sr.recent)]
		need := min(int(r.l.nl[st.segs[r.markOff+r.markCount-1].hz])+1, len(r.l.text))
		if r.l.text[0] != l.text[0] || need <= shared {
			continue
		}
		c := st.segIdx.samePrefix(l.text, 0, r.l.text[:need], 0)
		if c > shared {
			src, shared = r, c
		}
		if c == need {
			break
		}
	}
	n, m := len(st.blocks), len(st.segs)
	for len(st.copyOf) < n {
		st.copyOf = append(st.copyOf, -1)
	}
	if src != nil {
		// The last mark whose lines up to hz, "\n" included, are shared.
		// The line ends are compared too, although the scanner records
		// one for every decoded "\n" however it was escaped: the copy is
		// only as right as the lines it is made from.
		marks := st.segs[src.markOff : src.markOff+src.markCount]
		a, b := src.l.nl, l.nl
		n := min(len(a), len(b), int(marks[len(marks)-1].hz)+1)
		same := commonPrefix(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(a))), 4*n), unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), 4*n)) / 4
		same = sort.Search(same, func(j int) bool { return int(a[j]) >= shared }) // lines ending inside the shared bytes
		k := sort.Search(len(marks), func(k int) bool { return int(marks[k].hz) >= same })
		if k > 0 {
			from = marks[k-1]
			st.blocks = append(st.blocks, st.blocks[src.blockOff:src.blockOff+int(from.nblocks)]...)
			st.segs = append(st.segs, marks[:k]...)
			for j := range int(from.nblocks) {
				st.copyOf = append(st.copyOf, int32(src.blockOff+j))
			}
		}
	}
	stop := -1 // counted from n, the text's first block, copies included
	if sr.limited {
		stop = n + sr.left // one block past the limit is enough to know
	}
	sg := segmenter{l: l, tags: tags, hz: int(from.hz), marks: &st.segs, base: n, limited: stop >= 0, stop: stop}
	if !sr.off {
		sg.idx, sg.cur, sg.markBase = &st.segIdx, int32(len(st.segIdx.texts)), m
	}
	st.blocks = sg.run(st.blocks, int(from.line))
	st.steps += sg.steps
	for len(st.copyOf) < len(st.blocks) {
		st.copyOf = append(st.copyOf, -1)
	}
	for _, c := range sg.copies {
		for k := range c[2] {
			st.copyOf[c[0]+k] = c[1] + k
		}
	}
	if !sr.off {
		st.segIdx.texts = append(st.segIdx.texts, segText{l: l, blockOff: n, markOff: m, markCount: len(st.segs) - m})
		st.segIdx.commit()
	}
	if len(st.segs) > m && !sr.off {
		sr.recent[sr.nrecent%len(sr.recent)] = segText{l: l, blockOff: n, markOff: m, markCount: len(st.segs) - m}
		sr.nrecent++
	}
	return from
}
