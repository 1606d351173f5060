package rewrite

// Compaction that pays (issue 14 item 3).
//
// Gemini's implicit cache bills the prefix a request shares with a recent
// one at the cached rate (a tenth of the input price for every current
// model). Compaction (Options.CompactSuperseded) replaces older versions
// of a document by references, also in turns the previous request already
// sent: from the first such replacement on, the prompt no longer starts
// with what was sent, and the rest of that prefix is billed at the full
// input price once more. Options.Sent tells the rewrite how much of the
// request was sent before, so that it can weigh the two.
//
// The rewrite with CompactSuperseded off is prefix-stable: it replaces
// only exact repeats of an earlier copy, each by a reference to the first
// copy, which depends on nothing that comes later, so a request's sent
// turns come out of the next request's rewrite byte for byte as they were
// sent. The caller sets Options.Sent only for a conversation whose every
// request so far went out as that rewrite would have sent it
// (Report.Compacted was false each time): then that rewrite of this
// request keeps the sent prefix whole. weigh compares it with compaction,
// in bytes of text (an image counts mediaBytes):
//
//	R = the bytes compaction removes beyond it;
//	L = the bytes of the sent prefix from compaction's first change to
//	    the end of the prefix, which lose the cached rate;
//	H = the user turns of the sent prefix.
//
// This request costs R × input less with compaction and L × (input −
// cached) more; every later request of the conversation that finds the
// kept bytes in the cache pays R × cached for them. A conversation that
// has run H turns is taken to run about H more, so compaction pays when
//
//	R × (1 + H × ratio) > L × (1 − ratio),  ratio = cached ÷ input.
//
// When it does not, the request goes out as the rewrite with
// CompactSuperseded off would send it: the sent prefix stays as it was,
// and only the new turns' exact repeats become references. When it does,
// the request is compacted, and the conversation is no longer weighed
// (its sent prompt is not the rewrite with compaction off any more). The
// comparison is made without H too (R > L × (1 − ratio), this request
// alone): on the bench's long-50 session, which edits a file every ten
// turns, that rule keeps the old versions and costs more over the
// session than compacting (BENCHMARKS.md).
//
// Keeping is always lossless (it replaces a subset of what compaction
// replaces, each by a reference to a full copy in the output), and the
// audit checks the output as it checks any rewrite.

// SentPrefix describes what the previous request of a conversation sent
// upstream (Options.Sent).
type SentPrefix struct {
	// Contents is the number of leading contents of this request that the
	// previous request of the conversation held, byte for byte as the
	// client sent them, and that were sent upstream as this package's
	// rewrite with CompactSuperseded off sends them.
	Contents int
	// CachedRatio is the model's cached-input price over its input price
	// (0..1): 0.1 for every current Gemini model.
	CachedRatio float64
}

// CompactionReason says why a request was or was not compacted
// (Compaction.Reason). The set is closed: metrics use the values as
// label values.
type CompactionReason string

const (
	// CompactionPays: compaction changes the sent prefix and saves more
	// than the cached rate it loses.
	CompactionPays CompactionReason = "pays"
	// CompactionKeepsPrefix: compaction would change the sent prefix for
	// less than the cached rate it loses; the prefix was kept.
	CompactionKeepsPrefix CompactionReason = "keeps_prefix"
	// CompactionAfterPrefix: compaction changes only turns after the
	// sent prefix, which costs no cached rate.
	CompactionAfterPrefix CompactionReason = "after_prefix"
)

// CompactionReasons lists every CompactionReason, in a stable order.
var CompactionReasons = []CompactionReason{CompactionPays, CompactionKeepsPrefix, CompactionAfterPrefix}

// Compaction is how the rewrite weighed compaction against the sent
// prefix (Report.Compaction).
type Compaction struct {
	// Kept reports that the request was sent as the rewrite with
	// CompactSuperseded off sends it, keeping the sent prefix.
	Kept   bool
	Reason CompactionReason
	// RemovedBytes is what compaction removes beyond the rewrite with it
	// off; PrefixBytes the bytes of the sent prefix from compaction's
	// first change to its end; Turns the user turns of the sent prefix.
	// Text counts decoded bytes, an image mediaBytes. Zero with
	// CompactionAfterPrefix.
	RemovedBytes, PrefixBytes, Turns int
}

// Pays reports whether compaction pays with the weights of Compaction:
// the test weigh applies.
func (c *Compaction) pays(ratio float64) bool {
	return float64(c.RemovedBytes)*(1+float64(c.Turns)*ratio) > float64(c.PrefixBytes)*(1-ratio)
}

// mediaBytes is what an inline or file data part weighs against text in
// weigh: 258 tokens (an image up to 384 px) at 3.5 bytes per token.
const mediaBytes = 903

// Compacted reports whether the output differs from what the rewrite
// with CompactSuperseded off would have made of the same request: it
// replaced an older version of a document, or a copy by a reference to a
// later one. Only a conversation whose requests were never compacted may
// be given Options.Sent.
func (r *Report) Compacted() bool { return r.compacted }

// compacted reports whether reps hold a replacement that the rewrite with
// CompactSuperseded off does not make (see Report.Compacted).
func compacted(reps []*occ) bool {
	for _, o := range reps {
		if o.super || o.later {
			return true
		}
	}
	return false
}

// weigh decides, after decide made the decisions with compaction on,
// whether they go out or the decisions with compaction off (see the
// comment at the top). It returns nil when both are the same.
func (e *engine) weigh(sent SentPrefix) *Compaction {
	k := min(sent.Contents, len(e.req.contents))
	if k <= 0 {
		return nil
	}
	differs := false
	for i := range e.occs {
		if o := &e.occs[i]; o.replace && (o.super || o.later) {
			differs = true
			break
		}
	}
	if !differs {
		return nil
	}
	type decision struct {
		replace bool
		ref     string
	}
	on := make([]decision, len(e.occs))
	for i := range e.occs {
		on[i] = decision{e.occs[i].replace, e.occs[i].ref}
	}
	e.redecide(false)
	first := -1
	for i := range e.occs {
		if o := &e.occs[i]; o.replace != on[i].replace || o.replace && o.ref != on[i].ref {
			first = i
			break
		}
	}
	if first < 0 {
		return nil // the same output either way
	}
	if e.occs[first].turn >= k {
		e.redecide(true)
		return &Compaction{Reason: CompactionAfterPrefix}
	}
	c := &Compaction{PrefixBytes: e.prefixFrom(first, k)}
	off := e.removed()
	for t := range k {
		if e.role(t) == "user" {
			c.Turns++
		}
	}
	e.redecide(true)
	c.RemovedBytes = e.removed() - off
	ratio := min(max(sent.CachedRatio, 0), 1)
	if c.pays(ratio) {
		c.Reason = CompactionPays
		return c
	}
	e.redecide(false)
	c.Kept, c.Reason = true, CompactionKeepsPrefix
	return c
}

// redecide clears the decisions of decide and makes them again, with
// compaction on or off.
func (e *engine) redecide(compact bool) {
	for i := range e.occs {
		o := &e.occs[i]
		o.replace, o.rule, o.target, o.tgt, o.later, o.super = false, "", 0, 0, false, false
		o.active, o.pinned = false, false
		o.ref, o.refEsc, o.refName, o.refBytes = "", false, "", 0
	}
	for _, d := range e.docs {
		d.split = false
	}
	// The entries under negative document numbers are decide's (full
	// copies and pinned versions); the others are the versions' first
	// occurrences, made by place.
	for k := range e.versions {
		if k.doc < 0 {
			delete(e.versions, k)
		}
	}
	e.decideWith(compact)
}

// removed returns the bytes the current decisions remove: for each
// replaced occurrence its size (mediaBytes for an image) minus its
// reference's.
func (e *engine) removed() int {
	n := 0
	for i := range e.occs {
		if o := &e.occs[i]; o.replace {
			n += occBytes(o) - len(o.ref)
		}
	}
	return n
}

func occBytes(o *occ) int {
	if o.b.kind == kindImage {
		return mediaBytes
	}
	return o.b.end - o.b.start
}

// prefixFrom returns the bytes of the output, with the current decisions,
// from the start of occurrence first to the end of content k-1: text
// parts their decoded size, media mediaBytes, other parts their JSON,
// less what the replacements and runs there remove.
func (e *engine) prefixFrom(first, k int) int {
	o := &e.occs[first]
	n := 0
	for t := o.turn; t < k; t++ {
		for pi := range e.req.contents[t].parts {
			if t == o.turn && pi < o.part {
				continue
			}
			switch p := &e.req.contents[t].parts[pi]; {
			case p.kind == partText:
				n += p.dec.size
			case p.media:
				n += mediaBytes
			default:
				n += p.obj.end - p.obj.start
			}
		}
	}
	if o.b.kind != kindImage {
		n -= o.b.start // the text of its part before it
	}
	after := func(q *occ) bool {
		return q.turn < k && (q.turn > o.turn || q.turn == o.turn && (q.part > o.part || q.part == o.part && q.b.start >= o.b.start))
	}
	for i := first; i < len(e.occs); i++ {
		if q := &e.occs[i]; q.replace && after(q) {
			n -= occBytes(q) - len(q.ref)
		}
	}
	for i := range e.runs {
		if q := &e.runs[i]; q.replace && after(q) {
			n -= occBytes(q) - len(q.ref)
		}
	}
	return max(n, 0)
}
