package rewrite

import (
	"bytes"
	"unsafe"
)

// The un-flattening pre-check (issue 17). unflattenRequest runs on every
// request with a Verifier, and almost always finds no transcript: the
// tests that reject come first, and none of them allocates.

// flatBufBytes is the size of the buffer flatText may decode into.
const flatBufBytes = 1024

// flatText returns the decoded text of part p for the pre-check, without
// allocating: decodedText, or for a short lazy text with escapes its
// decoding into buf (the result then views buf).
func flatText(body []byte, p *part, buf []byte) string {
	raw := body[p.str.start:p.str.end]
	if p.lazy && p.esc && len(raw) <= len(buf) {
		if d, ok := decodeRaw(buf, raw); ok {
			return bytesString(d)
		}
	}
	return decodedText(body, p)
}

// decodedText returns the decoded text of part p: the scan's decoding, the
// raw bytes when the string holds no escape (the body is not modified
// while Request runs), else a new decoding.
func decodedText(body []byte, p *part) string {
	raw := body[p.str.start:p.str.end]
	switch {
	case !p.lazy:
		return p.dec.text
	case !p.esc:
		return unsafe.String(unsafe.SliceData(raw), len(raw))
	}
	return unescape(raw)
}

// mayHint reports whether generationConfig value gc may make sideTaskHint
// true without decoding it: it is not an object, holds an escape (a key
// may be spelled with one), or names one of the members sideTaskHint
// reads. The scan validated the body, so an object here decodes.
func mayHint(gc []byte) bool {
	gc = bytes.TrimLeft(gc, " \t\r\n")
	if len(gc) == 0 || gc[0] != '{' || bytes.IndexByte(gc, '\\') >= 0 {
		return true
	}
	return bytes.Contains(gc, []byte("response")) || bytes.Contains(gc, []byte("maxOutputTokens")) ||
		bytes.Contains(gc, []byte("max_output_tokens"))
}
