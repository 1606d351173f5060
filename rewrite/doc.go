// Package rewrite losslessly rewrites naive Gemini generateContent requests
// into deduplicated contents (DESIGN §3). It is pure: bytes in, bytes and a
// Report out; no I/O, no clock, no state between calls that an output could
// depend on. Buffers are pooled between calls, a caller may pass a Memo
// (through its Verifier) so that the turns a conversation re-sends are not
// segmented again, and Options.Buffer lets it give the memory of the
// rewritten body (the proxy pools it); none changes a single output byte.
//
// The Memo does not pay today. Its keys are a 128-bit seeded maphash chain
// (a SHA-256 chain cost more than the whole analysis), yet on
// BenchmarkTurn50 (turn 50, 51 contents, about 330 KB; -count 5 medians
// on 2 busy cores) a warm memo takes 462 µs, a cold one 568 µs (0.84×),
// and no memo 372 µs: warm is 1.27× slower than no memo, because
// segmenting a turn is now cheaper than looking its analysis up and
// checking it. The proxy therefore passes no Memo (cache.Verifier does not
// implement it); the interface and its tests stay for a cheaper analysis
// store or a costlier segmenter.
//
// The Report also describes the rewritten request (TextBytes, OtherBytes,
// Contents, Media) and lists the blocks of its new turn (Blocks) with a
// ConversationID, so that the proxy calibrates token estimates and feeds
// the block index without decoding the body again.
//
// # How it works
//
// A small validating JSON scanner records the byte ranges of
// contents[i].parts[j] and of their text and inlineData.data strings;
// everything else is copied as raw byte ranges, so fields the rewriter does
// not change (unknown fields, snake_case keys, key order, white space,
// thoughtSignature encodings) stay byte for byte. Decoding is one pass; a
// text whose raw bytes begin like one of the few texts decoded just before
// it (a naive client re-sending a file ahead of a new question) copies
// their decoded form up to the last checkpoint inside the shared prefix
// instead of decoding it again. Segmentation does the same: such a text
// takes over the blocks of the earlier one that lie wholly in the shared
// prefix (with their content ids and hashes) and is segmented only after
// them (segment.go, segMark).
//
// A request whose texts are all shorter than Options.MinBlockBytes, and
// that has no inlineData part to analyse, cannot change: such texts are
// validated and measured in the scan but never decoded or segmented, and
// the body is returned as it is. Otherwise the texts read before the first
// long one are decoded after the scan.
//
// Only text parts whose members are exactly "text", parts whose only
// member is inlineData/inline_data with data and mimeType, and (with
// Options.ToolResults) user parts whose only member is functionResponse
// are analysed; any other part (thoughtSignature, functionCall,
// executableCode, codeExecutionResult, fileData, thought, unknown members)
// is never touched, nor is anything outside contents, nor a
// functionResponse beyond the string values of its response.
//
// A text part that is a JSON object or array, and a ```json fence holding
// one, is analysed by its string values (jsontext.go, DESIGN §3
// "Structured texts"): each value of at least Options.MinBlockBytes is
// decoded and is a text of its own, segmented as below; a value without
// a block, of three lines or more and not under a prose member (prompt,
// explanation …), is one document block whose lead-in is its member name
// (with the sibling values that tell payloads apart: env, id, region …)
// and whose name is a sibling file path. A replaced span of a value
// becomes the reference escaped twice, so that the text stays valid JSON
// with its keys in order. A functionResponse's response string value of
// at least Options.MinBlockBytes is one block that becomes an unchanged
// reference to a full copy earlier in the request (a text, a value, or a
// functionCall's argument, read but never changed); it is a document of
// its own, never superseded. Report.Replacements name their Source (text,
// json_text, tool_result, inline_data). A JSON text with no string value
// of Options.MinBlockBytes is a text like any other.
//
// Each analysed text is segmented into blocks: fenced code (``` and ~~~,
// CommonMark fence rules, a fence left open by truncation, a closing fence
// glued to the last code line), with a file name from the info string or a
// caption, banner or path line directly above; XML-like document tags
// (Options.DocumentTags) named by a path attribute or a <file_path> child;
// text banners ("--- a.go ---" … "--- End of content ---", "FILE: a.go"
// between "=====" rules, "[CONTEXT FILE] a.go", "// File: a.ts" banners,
// also inside one fenced blob); project trees and open-tab lists (secondary
// context); and runs of lines outside any block that repeat an earlier turn
// verbatim. A whole inlineData part is a block compared by its decoded
// bytes, so standard and URL-safe base64 are the same block.
//
// A block belongs to a document (identity.go): a named block to the
// document of its file name; two blocks in one turn are two documents
// unless they share a name. An unnamed block continues an earlier
// document only across turns and on evidence beyond line similarity: the
// same lead-in line in a user turn (one that introduces no two blocks of
// a turn, in a turn that re-sends no other copy), or being the one block
// of its turn right after the document's one block in the other role (a
// model's proposal, or the user's copy of one); it must then resemble the
// document's latest version (line-set similarity ≥ Options.Similarity),
// and differing lead-ins or opening tags, or two documents that could be
// continued, keep it a document of its own. An exact repeat of an unnamed
// block belongs to the same document unless its lead-in differs. A block
// that is a strict substring of less than half of a document's latest
// version (a retrieval chunk), or the reverse, is a document of its own:
// it is only ever replaced by a reference to an identical block. So is a
// named block less than half the size of its file's latest version once
// the substring tests of one request have scanned 8× the body (many small
// blocks named as one huge file would otherwise cost their number times
// its size).
//
// The active versions of a document are its latest version (the content
// of its latest occurrence) and every version in the newest user turn.
// The full text of each active content is kept once, at its first
// occurrence as an active version (in the newest user turn when that turn
// holds an older version, and the latest version after every block of
// another version that stays in full, such as one in the newest user turn
// before a trailing model turn or one whose reference would be too long,
// so that a second rewrite finds the same latest version and nothing to
// supersede); its other copies become unchanged references, whichever
// document they belong to. Copies of other versions, which are never in
// the newest user turn, become superseded references to the latest
// (Options.CompactSuperseded), unless the block holds a line that reads as
// a transcript turn label; with Options.Sent, copies in turns the previous
// request already sent are superseded only when that saves more than the
// implicit-cache prefix it breaks costs (compaction.go, Report.Compaction).
// Runs of repeated lines are only ever unchanged
// references. Line endings are normalised only for comparison. A block is
// replaced only when it is at least Options.MinBlockBytes long and its
// reference at most half its size.
//
// Consecutive unchanged references in one text part, with the text between
// them, become one reference when that whole span, grown over the lines
// around it that still match, repeats one contiguous span of a single
// earlier part (coalesce.go): a Markdown document with inner fences pasted
// in a plain ``` fence is split by CommonMark into several blocks and free
// text, and its re-sent copy is then one reference, not one per piece. A
// piece named as another file, a superseded or image reference, a
// differing line, or a copy that stays in full because another reference
// names it (a block, or the lines a run of repeated lines repeats) stops
// the merge.
//
// # Reference format
//
// A replaced block becomes one line of plain text, at most 200 bytes,
// deterministic (the same input gives the same bytes):
//
//	[unchanged: NAME sha256:HASH12, identical to the copy WHERE]
//	[superseded: NAME sha256:HASH12, replaced by the version WHERE]
//	[same MIME sha256:HASH12 as WHERE]
//
// NAME is the document's file name, or the first line of the block when it
// has none ("project tree" and "open tabs" for secondary context), with
// control characters and brackets turned into spaces and cut to 80 bytes
// (40 for an unwrapped run of repeated lines).
// MIME is the inlineData mime type. HASH12 is the first 12 hex digits of the
// SHA-256 of the exact replaced text (wrapper lines included, line endings
// as sent), or of the decoded bytes for inlineData. WHERE is "in turn N"
// (1-based index into contents), "in your previous reply" (the model turn
// right before the current user turn), or "earlier in this turn" / "later in
// this turn". Replacement.SHA256 carries the full hash. A replaced inlineData
// part becomes {"text":"REFERENCE"}.
// Inside a JSON value the line is escaped as the value's contents, then
// as the text's; inside a tool result, as the string's.
//
// References are never parsed back: a user who types a reference-looking
// string only adds text, which is kept like any other text.
//
// # Un-flattening
//
// A last user turn whose one text part is a flattened transcript becomes
// real alternating turns (transcript.go gives the rules; DESIGN §3 N2).
// Turns are split before blocks are read: label lines are found first,
// and fences, document tags and triple-quoted documents are matched inside
// a segment, never across the labels that split it; a region that would
// hold label lines keeps them as content only when it is closed and in
// step (flatregion.go), so labels inside a program that builds a
// transcript never split it, while a fence left open by a truncated answer
// or opened on the label's line ("User: ```go") does not swallow the
// exchanges after it. Only text the Verifier says this proxy served to the
// tenant is promoted to a model turn, and the turn is the quoted answer
// byte for byte, with the answer's own trailing white space when the
// Verifier is a TrailVerifier. Blocks are then segmented turn by turn.
//
// A history serialised as JSON inside that text (a list of
// {"role": …, "content": …} objects, {"history": […]}, author/text,
// from/value, role/parts; jsonhist.go gives the rules) is un-flattened the
// same way, tried first: a model message is promoted only when its
// content, decoded from its JSON string, was served to the tenant, and the
// model turn is then that decoded string byte for byte; user messages
// become their decoded content, the preamble and the text after the JSON
// stay in place, and a message that is unverified, a system message or
// not plain text stays user text as its JSON object, verbatim.
//
// # Guarantees
//
// Request is idempotent (rewriting its output changes nothing) and
// deterministic; it never creates, merges or reorders turns except when
// un-flattening, and the full text of each active version stays in the
// output. With Options.StablePrefix it splits a user text part that is a
// question followed by large blocks into two parts, the blocks first
// (stable.go gives the rule): text is never changed, only a part boundary
// added. On anything it cannot handle it returns an error (ErrInvalidJSON,
// ErrNoContents, ErrUnsupported) and the caller forwards the original.
//
// Audit checks a rewritten body against the original before it is sent
// (audit.go; the proxy forwards the original when it fails). The Report
// keeps, unexported, the raw offsets of every replaced span and of the
// full copy it points to, of every split part and of the ranges of the
// transcript each un-flattened turn joins; the audit shares no code with
// segmentation or identity, trusts these records only for where things
// are, and re-derives the rest from the original bytes: the output with
// every reference expanded and every split undone is the original (an
// un-flattened transcript rebuilt from its ranges, with at most 160 bytes
// besides white space left out between two of them: labels); each
// reference names the SHA-256 of the bytes it replaced (hashed once per
// distinct content, by the rewrite: the audit reads the hash the rewrite
// recorded for a raw span only when that span holds exactly the bytes
// replaced, and computes it otherwise); the full copy of an unchanged or image reference is
// in the output, uncut, with the same content; a superseded reference is
// a document block (fence, tag, banner, inline data, tree or tab list, a
// whole JSON value; not a run of lines, a coalesced span nor a tool
// result), not in the newest user turn (which the audit finds in the
// body itself, the last element of contents whose role is "user" or
// absent, with a walker of its own, never from the engine's records;
// auditnewest.go), not across the boundary of two transcript turns, and its newer version is in
// the output in full; a promoted model turn is one range of the
// transcript, byte for byte, with nothing in it replaced. For a JSON
// history (audithist.go) a range may be the contents of a JSON string of
// the text, which the audit checks is one and decodes itself, and what is
// left out between two ranges holds no message content and no value over
// 64 bytes: a promoted model turn is then the decoding of one JSON string,
// byte for byte. A span in a JSON value lies in one string value (never a
// key) of a container that is one JSON value, between two characters of
// both escapings, and a tool result's is its whole string with its full
// copy before it (auditjson.go). A failure is an
// *AuditError whose Reason is one of AuditReasons. Every golden output and
// every rewrite of the fuzz targets is audited.
//
// Elide (session mode) audits its own output before returning it
// (auditsession.go): a session reference has no full copy in the body, so
// the audit re-hashes the bytes it replaced and asks the caller's sent set
// again with that hash, and the span must lie in the new turn, a user
// turn (never a trailing model prefill, which the model continues word for
// word). Audit never accepts a session reference.
package rewrite
