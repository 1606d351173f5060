package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"strings"
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
	mode    byte // 0 undecided, 'o' JSON objects, 's' SSE, 'x' gave up
	gzipped bool
	gz      []byte

	// SSE state.
	line     []byte
	lineOver bool
	data     []byte
	dataOver bool

	// JSON object scanner state.
	base, depth   int
	inStr, esc    bool
	capturing     bool
	obj           []byte
	objOver       bool
	finished      bool
	usage         *Usage
	modelVersion  string
	text          strings.Builder
	textTruncated bool
	events        int
}

// newTap returns a tap for a body with the given Content-Encoding. It
// returns nil for encodings it cannot decode.
func newTap(contentEncoding string) *tap {
	switch strings.ToLower(strings.TrimSpace(contentEncoding)) {
	case "", "identity":
		return &tap{}
	case "gzip", "x-gzip":
		return &tap{gzipped: true}
	}
	return nil
}

// Write feeds body bytes to the tap. It always reports len(p), nil.
func (t *tap) Write(p []byte) (int, error) {
	if t.gzipped {
		if t.mode != 'x' {
			if len(t.gz)+len(p) > maxGzipBytes {
				t.mode, t.gz = 'x', nil
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
		r := io.LimitReader(zr, maxGunzipBytes)
		for t.mode != 'x' {
			n, err := r.Read(buf)
			t.feed(buf[:n])
			if err != nil {
				break
			}
		}
	}
	if t.mode == 's' {
		if len(t.line) > 0 || t.lineOver {
			t.endLine()
		}
		t.dispatchSSE()
	}
	t.line, t.data, t.obj = nil, nil, nil
}

func (t *tap) sse(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.appendLine(p)
			return
		}
		t.appendLine(p[:i])
		p = p[i+1:]
		t.endLine()
	}
}

func (t *tap) appendLine(p []byte) {
	if t.lineOver {
		return
	}
	if len(t.line)+len(p) > maxEventBytes {
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
		if t.dataOver || len(t.data)+len(v)+1 > maxEventBytes {
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
	if !t.dataOver && len(t.data) > 0 {
		t.decode(t.data)
	}
	t.data, t.dataOver = t.data[:0], false
}

// objects scans for top-level JSON objects (the body itself, or the
// elements of a streamed array) and decodes each as it completes.
func (t *tap) objects(p []byte) {
	start := -1
	if t.capturing {
		start = 0
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if t.inStr {
			if t.esc {
				t.esc = false // c is the escaped byte
				continue
			}
			// Skip to the next quote or backslash quickly.
			j := bytes.IndexAny(p[i:], "\"\\")
			if j < 0 {
				break
			}
			i += j
			if p[i] == '\\' {
				t.esc = true
			} else {
				t.inStr = false
			}
			continue
		}
		switch c {
		case '"':
			t.inStr = true
		case '{', '[':
			if c == '{' && t.depth == t.base && !t.capturing {
				t.capturing, start = true, i
				t.obj, t.objOver = t.obj[:0], false
			}
			t.depth++
		case '}', ']':
			t.depth--
			if t.depth < 0 {
				t.mode = 'x'
				return
			}
			if c == '}' && t.depth == t.base && t.capturing {
				t.appendObj(p[start : i+1])
				if !t.objOver {
					t.decode(t.obj)
				}
				t.capturing, start = false, -1
			}
		}
	}
	if t.capturing && start >= 0 {
		t.appendObj(p[start:])
	}
}

func (t *tap) appendObj(p []byte) {
	if t.objOver {
		return
	}
	if len(t.obj)+len(p) > maxEventBytes {
		t.objOver, t.obj = true, t.obj[:0]
		return
	}
	t.obj = append(t.obj, p...)
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

func (t *tap) decode(b []byte) {
	var c tapChunk
	if err := json.Unmarshal(b, &c); err != nil {
		return
	}
	t.events++
	if c.UsageMetadata != nil {
		t.usage = c.UsageMetadata
	}
	if c.ModelVersion != "" {
		t.modelVersion = c.ModelVersion
	}
	for _, cand := range c.Candidates {
		if cand.Index != 0 {
			continue
		}
		for _, part := range cand.Content.Parts {
			if part.Thought || part.Text == "" || t.textTruncated {
				continue
			}
			if t.text.Len()+len(part.Text) > MaxTextBytes {
				t.text.WriteString(part.Text[:MaxTextBytes-t.text.Len()])
				t.textTruncated = true
				continue
			}
			t.text.WriteString(part.Text)
		}
	}
}

// tapBody tees a response body into a tap as the ReverseProxy reads it.
type tapBody struct {
	rc  io.ReadCloser
	t   *tap
	eof bool
}

func (b *tapBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.t.Write(p[:n]) //nolint:errcheck // never fails
	}
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *tapBody) Close() error { return b.rc.Close() }
