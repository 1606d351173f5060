package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
)

// refLayout is the layout as the reference implementation below returns
// it.
type refLayout struct {
	sums     []uint64
	bytes    []int
	fixed    []float64
	key      string
	ends     []string
	leads    [][]byte
	texts    []string
	explicit bool
	media    bool
}

// The reference implementation of layoutOf: encoding/json throughout, as
// proxy/ledger.go laid out a request before the scanner (issue 17). The
// oracle of TestLayoutOfReference and FuzzLayoutOf.

// refLedgerRequest is the part of a generate request that the layout reads.
type refLedgerRequest struct {
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

// layoutOf lays out a generate request body sent to model.
func refLayoutOf(body []byte, model string) (*refLayout, error) {
	var req refLedgerRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	p := &refLayout{explicit: req.CachedContent != "" || req.CachedContent_ != ""}
	h := sha256.New()
	var sum [sha256.Size]byte
	written, keyed := 0, false
	var bytesSoFar int
	var fixedSoFar float64
	// lead is what was hashed since the last checkpoint, while it is only
	// part markers (the text-end and text-start bytes).
	var lead []byte
	write := func(b ...[]byte) {
		for _, x := range b {
			h.Write(x) //nolint:errcheck // never fails
			written += len(x)
		}
	}
	check := func(nbytes int, fixed float64, text string, textLead []byte) {
		p.leads = append(p.leads, textLead)
		p.texts = append(p.texts, text)
		lead = lead[:0]
		bytesSoFar += nbytes
		fixedSoFar += fixed
		s := h.Sum(sum[:0])
		p.sums = append(p.sums, binary.BigEndian.Uint64(s))
		p.bytes = append(p.bytes, bytesSoFar)
		p.fixed = append(p.fixed, fixedSoFar)
		if !keyed && written >= ledgerKeyBytes {
			p.key, keyed = hex.EncodeToString(s[:16]), true
		}
	}
	si := refFirstRaw(req.SystemInstruction, req.SystemInstruction_)
	tc := refFirstRaw(req.ToolConfig, req.ToolConfig_)
	write([]byte(model), []byte{0}, refCompactRaw(si), []byte{0}, refCompactRaw(req.Tools), []byte{0}, refCompactRaw(tc), []byte{0})
	check(len(si)+len(req.Tools)+len(tc), 0, "", nil)
	for _, c := range req.Contents {
		role := c.Role
		if role == "" {
			role = "user"
		}
		if len(p.sums) > 1 {
			s := h.Sum(sum[:0])
			p.ends = append(p.ends, hex.EncodeToString(s[:16]))
		}
		write([]byte{1}, []byte(role), []byte{0})
		check(0, 1, "", nil)
		for _, raw := range c.Parts {
			if text, ok := refTextOnly(raw); ok {
				for off := 0; off < len(text) || off == 0; off += ledgerChunk {
					chunk := text[off:min(off+ledgerChunk, len(text))]
					write([]byte{2}, []byte(chunk))
					lead = append(lead, 2)
					check(len(chunk), 0, chunk, append([]byte(nil), lead...))
				}
				write([]byte{3})
				lead = append(lead, 3)
				continue
			}
			write([]byte{4}, refCompactRaw(raw), []byte{0})
			if bytes.Contains(raw, []byte(`"inlineData"`)) || bytes.Contains(raw, []byte(`"inline_data"`)) ||
				bytes.Contains(raw, []byte(`"fileData"`)) || bytes.Contains(raw, []byte(`"file_data"`)) {
				check(0, ImageTokens, "", nil)
				p.media = true
				continue
			}
			check(len(raw), 0, "", nil)
		}
	}
	s := h.Sum(sum[:0])
	if !keyed {
		p.key = hex.EncodeToString(s[:16])
	}
	p.ends = append(p.ends, hex.EncodeToString(s[:16]))
	return p, nil
}

func refFirstRaw(a, b json.RawMessage) json.RawMessage {
	if len(a) > 0 && string(a) != "null" {
		return a
	}
	if string(b) == "null" {
		return nil
	}
	return b
}

// compactRaw returns raw without insignificant white space, so that a
// client's formatting does not count as a change.
func refCompactRaw(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// textOnly returns the text of a part whose only member is text.
func refTextOnly(raw json.RawMessage) (string, bool) {
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
