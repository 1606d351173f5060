package rewrite

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Rule names the rewrite rule that replaced or restructured content.
// The set is closed: metrics use these values as label values.
type Rule string

const (
	// RuleUnchanged replaced a copy of a document's active version by a reference.
	RuleUnchanged Rule = "unchanged"
	// RuleSuperseded replaced an older version of a document by a reference.
	RuleSuperseded Rule = "superseded"
	// RuleSecondary replaced repeated secondary context (trees, tab lists, preambles).
	RuleSecondary Rule = "secondary"
	// RuleImage replaced a repeated inlineData part by a text reference.
	RuleImage Rule = "image"
	// RuleUnflatten split a flattened transcript into real user/model turns.
	RuleUnflatten Rule = "unflatten"
	// RuleStable split a text part so that its trailing blocks come before
	// the text that led up to them (Options.StablePrefix).
	RuleStable Rule = "stable"
)

// Rules lists every Rule, in a stable order.
var Rules = []Rule{RuleUnchanged, RuleSuperseded, RuleSecondary, RuleImage, RuleUnflatten, RuleStable}

// Source names where a replaced span was found. The set is closed
// (Sources): metrics use the values as label values.
type Source string

const (
	// SourceText is a text part analysed as text.
	SourceText Source = "text"
	// SourceJSONText is a string value of a JSON text part or of a fenced
	// JSON block (DESIGN §3 "Structured texts").
	SourceJSONText Source = "json_text"
	// SourceToolResult is a string value of a functionResponse's response.
	SourceToolResult Source = "tool_result"
	// SourceInlineData is an inlineData part.
	SourceInlineData Source = "inline_data"
)

// Sources lists every Source, in a stable order.
var Sources = []Source{SourceText, SourceJSONText, SourceToolResult, SourceInlineData}

// ToolResultsMode selects how functionResponse values are handled.
type ToolResultsMode string

const (
	// ToolResultsDedup replaces a long string value of a functionResponse's
	// response that repeats content present in full earlier in the
	// request by an unchanged reference.
	ToolResultsDedup ToolResultsMode = "dedup"
	// ToolResultsOff never touches a functionResponse part.
	ToolResultsOff ToolResultsMode = "off"
)

// UnflattenMode selects how flattened transcripts are handled.
type UnflattenMode string

const (
	// UnflattenVerified promotes a transcript segment to a model turn only when
	// the Verifier confirms it was served to the same tenant.
	UnflattenVerified UnflattenMode = "verified"
	// UnflattenOff never un-flattens.
	UnflattenOff UnflattenMode = "off"
)

// Options configures a rewrite. The zero value is not useful; start from
// DefaultOptions.
type Options struct {
	// MinBlockBytes is the smallest block, in bytes, that may be replaced by a
	// reference. Smaller blocks are always kept.
	MinBlockBytes int
	// Similarity is the line-set similarity (0..1) at which an unnamed block is
	// taken as a version of an earlier document.
	Similarity float64
	// CompactSuperseded replaces copies of older versions of a document by
	// references. When false, only exact repeats are replaced.
	CompactSuperseded bool
	// Unflatten selects how flattened transcripts are handled.
	Unflatten UnflattenMode
	// DocumentTags are the XML-like tag names treated as document wrappers
	// (for example "file", "document", "source", "context").
	DocumentTags []string
	// Lexicon holds the labels and cues used to recognise flattened
	// transcripts. Nil means DefaultLexicon().
	Lexicon *Lexicon
	// StablePrefix moves large blocks that end a user turn's text part
	// ahead of the text before them, so that Gemini's implicit cache can
	// match them as a prefix (see stable.go). False keeps part order.
	StablePrefix bool
	// MaxParts, MaxLines and MaxBlocks bound the analysis records of one
	// request: a request with more parts in its contents, more lines in
	// its decoded texts or more blocks found in them is not rewritten
	// (ErrTooComplex). The analysis keeps about 200 bytes of records per
	// part and line and about a kilobyte per block, so a body of tiny
	// parts, short lines or tiny blocks would otherwise need tens of times
	// its size. Parts are counted as they are scanned, lines as they are
	// decoded and blocks as they are found, so a request over a limit
	// stops there, before its per-block records and its memo entries are
	// made. Zero means no limit.
	MaxParts  int
	MaxLines  int
	MaxBlocks int
	// ToolResults selects how functionResponse parts are handled. The
	// zero value is ToolResultsOff.
	ToolResults ToolResultsMode
	// Sent, when set, describes what the previous request of the
	// conversation sent upstream, so that compaction weighs what it saves
	// against the implicit-cache prefix it breaks (compaction.go). Nil
	// compacts as CompactSuperseded says.
	Sent *SentPrefix
	// Buffer, when set, is asked for the memory of the rewritten body:
	// it returns a slice with a capacity of at least n bytes, which
	// Request fills from its start, so that the returned body is then
	// the start of that memory. It lets a caller pool the bodies it
	// sends instead of collecting one per request (issue 17). Request
	// (and Elide) calls it only when it changes the body, once per body
	// it builds (at most twice a request: the body with its references,
	// then the one with Options.StablePrefix's splits), keeps nothing of
	// what it returns, and never reads what the slice held before. A
	// slice with less capacity than asked is not used. Nil allocates.
	Buffer func(n int) []byte
	// CountTokens, when set, counts the tokens of a text the way the
	// caller prices prompts (the proxy's ledger passes its tokenizer
	// model), so that Report.UnflattenedTokens says what un-flattening
	// removed in that unit: its JSON syntax and escapes tokenise far
	// denser than the text around them. It must be pure and safe for
	// concurrent use; Request calls it only on a request it un-flattens,
	// once on the flattened text and once per turn made of it. Nil leaves
	// UnflattenedTokens 0.
	CountTokens func(text string) int
}

// DefaultOptions returns the documented defaults (DESIGN §3).
func DefaultOptions() Options {
	return Options{
		MinBlockBytes:     512,
		Similarity:        0.5,
		CompactSuperseded: true,
		Unflatten:         UnflattenVerified,
		DocumentTags:      []string{"file", "document", "source", "context", "currentFileContent", "selected", "file_contents"},
		StablePrefix:      true,
		MaxParts:          DefaultMaxParts,
		MaxLines:          DefaultMaxLines,
		MaxBlocks:         DefaultMaxBlocks,
		ToolResults:       ToolResultsDedup,
	}
}

// The default limits of Options.MaxParts, MaxLines and MaxBlocks. Gemini
// takes at most a few thousand images per prompt, 250,000 lines of text
// are millions of tokens, more than any model's context window, and
// 25,000 blocks are a thousand files re-sent 25 times. At these limits the
// records of one request take at most about 40 MB; the decoded text, the
// output and decoded inline data add one to three times the body
// (TestLimitsBoundMemory).
const (
	DefaultMaxParts  = 20_000
	DefaultMaxLines  = 250_000
	DefaultMaxBlocks = 25_000
)

// Verifier reports whether a flattened transcript segment is a response this
// proxy served to the same tenant. Implementations must be safe for
// concurrent use. A nil Verifier verifies nothing.
//
// A Verifier that also implements Memo is used as the tenant's analysis
// memo as well (see Request).
type Verifier interface {
	// Served reports whether text matches, in full or as a long prefix after
	// whitespace normalisation, a response served to the tenant. text may
	// view the request body or the rewrite's buffers: it is valid only
	// during the call (copy it to keep it).
	Served(text string) bool
}

// Memo stores analysis results between requests of one tenant. Values are
// opaque to the caller. Implementations must be safe for concurrent use;
// GetAnalysis may miss at any time (eviction).
//
// Request uses a Memo when its Verifier also implements this interface.
// Keys are hex strings (32 digits) derived from hashes of the request, never
// prompt text; values are at most a few bytes per block found in a turn.
// The rewrite never depends on what a Memo returns: a value that is missing,
// stale, truncated or corrupted only costs the analysis it would have
// saved.
type Memo interface {
	// GetAnalysis returns the value last stored under key, if it is still
	// held. The caller does not modify it.
	GetAnalysis(key string) ([]byte, bool)
	// SetAnalysis stores value under key; it may drop it. The memo may keep
	// value without copying it.
	SetAnalysis(key string, value []byte)
}

// Replacement describes one span that the rewrite replaced.
type Replacement struct {
	Rule Rule
	// Turn and Part locate the replaced span: indices into contents and
	// into that turn's parts, in the request after un-flattening (the
	// original request when UnflattenedTurns is 0) and before the splits
	// of Options.StablePrefix.
	Turn, Part int
	// Document is the document's name, or its first line when it has none.
	Document string
	// SHA256 is the hex SHA-256 of the exact replaced content.
	SHA256 string
	// Bytes is the size of the replaced content; RefBytes the size of the
	// reference that replaced it. For text, both count bytes of the decoded
	// string; for an inlineData part, bytes of the JSON part.
	Bytes, RefBytes int
	// PromptBytes and PromptRefBytes are Bytes and RefBytes as the model
	// reads them, in the units of Report.TextBytes and OtherBytes: for a
	// span of a JSON text's string value, its escaped bytes in the part's
	// decoded text; for a tool result's value, its raw JSON string in the
	// body; elsewhere Bytes and RefBytes. A file pasted into a JSON string
	// is read with its escapes (a newline is `\n`), which tokenise apart
	// from the text around them.
	PromptBytes, PromptRefBytes int
	// Target is the index into contents of the turn that holds the full
	// copy (the identical copy, or the active version for RuleSuperseded).
	Target int
	// Reference is the text that replaced the span.
	Reference string
	// Source says where the span was: a text part, a string value of a
	// JSON text, a tool result or an inlineData part.
	Source Source
}

// Report says what a rewrite did.
type Report struct {
	// BytesBefore and BytesAfter are the body sizes before and after.
	BytesBefore, BytesAfter int
	// Replacements lists every replaced span, in request order.
	Replacements []Replacement
	// UnflattenedTurns is the number of turns created by un-flattening.
	UnflattenedTurns int
	// UnflattenedBytes is the decoded text un-flattening removed: the
	// flattened text's bytes minus those of the turns made of it (labels,
	// and a JSON history's syntax and escapes), which the model no longer
	// reads. It is not in Replacements.
	UnflattenedBytes int
	// UnflattenedTokens is Options.CountTokens of the flattened text minus
	// that of each turn made of it (0 without CountTokens): what
	// un-flattening removed, counted where UnflattenedBytes is measured,
	// not counting the role of each content it made.
	UnflattenedTokens int
	// Reordered is the number of text parts split by Options.StablePrefix
	// into their trailing blocks followed by the text before them.
	Reordered int

	// The fields below describe the rewritten request (the request after
	// un-flattening and replacement, whether or not the caller sends it)
	// so that callers need not decode a body again.

	// TextBytes is the decoded size of every text part of the rewritten
	// contents: what the upstream tokenises as text.
	TextBytes int
	// OtherBytes is the raw JSON size of the rest of the prompt: the parts
	// of the rewritten contents that are not text parts (function calls,
	// text with a thought signature, media …) and the systemInstruction,
	// tools and toolConfig values.
	OtherBytes int
	// Contents is the number of contents of the rewritten request.
	Contents int
	// Media reports whether the rewritten request still holds inline or
	// file data or refers to a cachedContent, whose tokens do not follow
	// from their bytes.
	Media bool
	// conv holds what ConversationID hashes (at most 520 bytes, copied:
	// the Report keeps nothing of the body); hasConv is false without
	// contents.
	conv    convInput
	hasConv bool
	// Blocks lists the distinct blocks (at least Options.MinBlockBytes)
	// of the last content of the rewritten request, the new turn, in the
	// order found; the earlier turns were the new turn of earlier requests.
	// Only these are hashed, so the cost is bounded by the new turn's size.
	Blocks []Block
	// aud records where the rewrite cut, split and un-flattened, for
	// Audit; nil when it changed nothing.
	aud *auditRec
	// subText and subOther are what the replacements in JSON texts and
	// tool results add to TextBytes and OtherBytes (jsontext.go).
	subText, subOther int
	// Compaction says how Options.Sent weighed compaction; nil when
	// Options.Sent is nil or compaction changed nothing (compaction.go).
	Compaction *Compaction
	// compacted: the output differs from the rewrite with
	// CompactSuperseded off (Compacted).
	compacted bool
}

// Block is one block of a request's new turn (Report.Blocks).
type Block struct {
	// SHA256 is the hex SHA-256 of the exact block content: the span a
	// reference would replace (as Replacement.SHA256) or, for an
	// inlineData part, the decoded data.
	SHA256 string
	// Bytes is the size of that content.
	Bytes int
	// Kind says what the block is: "code" (a fenced block), "document" (a
	// document tag or a file banner), "secondary" (a project tree or tab
	// list), "run" (lines repeating an earlier turn), "image" (an
	// inlineData part) or "tool_result" (a functionResponse value); a
	// whole JSON value is a "document".
	Kind string
}

// ConversationID identifies the conversation by the raw JSON bytes of
// the original request's first content: their hex SHA-256 up to 512
// bytes, else the SHA-256 of the first and last 256 bytes and the length,
// so that its cost does not grow with the body. Requests of one
// conversation re-send that content unchanged, so they share the id; it
// only groups the block index's statistics (cache.Store.RecordBlocks).
// It is "" for a request without contents. Request only copies the bytes
// to hash; the hash is computed on each call: most requests never need
// it, and those that do need it after the response.
func (r *Report) ConversationID() string {
	if !r.hasConv {
		return ""
	}
	return r.conv.id()
}

// Changed reports whether the rewrite changed the request.
func (r *Report) Changed() bool {
	return len(r.Replacements) > 0 || r.UnflattenedTurns > 0 || r.Reordered > 0
}

// RuleStats is the per-rule summary of a Report.
type RuleStats struct {
	Count        int // replaced spans (or created turns for RuleUnflatten)
	BytesRemoved int // bytes of replaced content minus bytes of references
}

// ByRule summarises the report per rule.
func (r *Report) ByRule() map[Rule]RuleStats {
	m := make(map[Rule]RuleStats)
	for _, x := range r.Replacements {
		s := m[x.Rule]
		s.Count++
		s.BytesRemoved += x.Bytes - x.RefBytes
		m[x.Rule] = s
	}
	if r.UnflattenedTurns > 0 {
		s := m[RuleUnflatten]
		s.Count += r.UnflattenedTurns
		m[RuleUnflatten] = s
	}
	if r.Reordered > 0 {
		m[RuleStable] = RuleStats{Count: r.Reordered}
	}
	return m
}

// BySource summarises the report per Source.
func (r *Report) BySource() map[Source]RuleStats {
	m := make(map[Source]RuleStats)
	for _, x := range r.Replacements {
		s := m[x.Source]
		s.Count++
		s.BytesRemoved += x.Bytes - x.RefBytes
		m[x.Source] = s
	}
	return m
}

// Header formats the report for the X-Gemini-Proxy-Report response header:
// "bytes=BEFORE->AFTER" followed by "; RULE=COUNT" for each rule applied, in
// a stable order, then "; json_text=COUNT" and "; tool_result=COUNT" for
// the replacements of those sources (counted in their rules as well), and
// "; compaction=REASON" when Options.Sent weighed compaction (Compaction).
// It never contains prompt text.
func (r *Report) Header() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bytes=%d->%d", r.BytesBefore, r.BytesAfter)
	by := r.ByRule()
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "; %s=%d", k, by[Rule(k)].Count)
	}
	// The structured sources, which the rule counts include.
	src := r.BySource()
	for _, s := range []Source{SourceJSONText, SourceToolResult} {
		if n := src[s].Count; n > 0 {
			fmt.Fprintf(&b, "; %s=%d", s, n)
		}
	}
	if r.Compaction != nil {
		fmt.Fprintf(&b, "; compaction=%s", r.Compaction.Reason)
	}
	return b.String()
}

// ErrNoContents is returned for a request without a contents array.
var ErrNoContents = errors.New("rewrite: request has no contents")

// ErrTooComplex is returned for a request with more parts, lines or
// blocks than Options.MaxParts, MaxLines or MaxBlocks allow. The caller forwards the
// original body, as for any error.
var ErrTooComplex = errors.New("rewrite: request has too many parts, lines or blocks")

// ErrInvalidJSON is returned when the body is not a JSON object.
var ErrInvalidJSON = errors.New("rewrite: body is not a valid JSON object")
