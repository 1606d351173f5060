package rewrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// goldenServed is a test Verifier: a set of served texts, matched after white
// space normalisation, in full or as a prefix of at least 40 bytes.
type goldenServed []string

func (s goldenServed) Served(text string) bool {
	t := strings.Join(strings.Fields(text), " ")
	for _, x := range s {
		x = strings.Join(strings.Fields(x), " ")
		if t == x || (len(t) >= 40 && strings.HasPrefix(x, t)) {
			return true
		}
	}
	return false
}

// wireRequest is the part of a request the checks decode with encoding/json,
// independently of the scanner under test.
type wireRequest struct {
	Contents []struct {
		Role  string            `json:"role"`
		Parts []json.RawMessage `json:"parts"`
	} `json:"contents"`
}

func wireText(raw json.RawMessage) (string, bool) {
	var p map[string]json.RawMessage
	if json.Unmarshal(raw, &p) != nil {
		return "", false
	}
	t, ok := p["text"]
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(t, &s) != nil {
		return "", false
	}
	return s, true
}

func partData(raw json.RawMessage) ([]byte, bool) {
	var p map[string]map[string]json.RawMessage
	if json.Unmarshal(raw, &p) != nil {
		return nil, false
	}
	d := p["inlineData"]
	if d == nil {
		d = p["inline_data"]
	}
	var s string
	if d == nil || json.Unmarshal(d["data"], &s) != nil {
		return nil, false
	}
	s = strings.TrimRight(s, "=")
	if b, err := base64.RawStdEncoding.DecodeString(s); err == nil {
		return b, true
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	return b, err == nil
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// checkInvariants verifies the contract of Request(in) = out, rep (DESIGN §3)
// without trusting the engine: it re-derives every removed span from the
// input and the report.
func checkInvariants(in, out []byte, rep *Report, opts Options, v Verifier) error {
	if !json.Valid(out) {
		return fmt.Errorf("output is not valid JSON")
	}
	if opts.StablePrefix {
		// The rest checks the output before the splits (stable_test.go).
		var err error
		if out, rep, err = unstable(in, out, rep, opts, v); err != nil {
			return err
		}
	}
	if rep.BytesBefore != len(in) || rep.BytesAfter != len(out) {
		return fmt.Errorf("report bytes %d->%d, want %d->%d", rep.BytesBefore, rep.BytesAfter, len(in), len(out))
	}
	// Fields outside contents are unchanged, byte for byte.
	var ti, to map[string]json.RawMessage
	if err := json.Unmarshal(in, &ti); err != nil {
		return fmt.Errorf("decoding input: %v", err)
	}
	if err := json.Unmarshal(out, &to); err != nil {
		return fmt.Errorf("decoding output: %v", err)
	}
	if len(ti) != len(to) {
		return fmt.Errorf("top-level members: %d in, %d out", len(ti), len(to))
	}
	for k, x := range ti {
		if k != "contents" && !bytes.Equal(x, to[k]) {
			return fmt.Errorf("member %q changed", k)
		}
	}
	if !rep.Changed() && !bytes.Equal(in, out) {
		return fmt.Errorf("unchanged report but different body")
	}
	if rep.UnflattenedTurns > 0 {
		return nil // the turn structure changed; checked by goldens
	}
	if len(out) > len(in) {
		return fmt.Errorf("output grew: %d > %d", len(out), len(in))
	}
	var wi, wo wireRequest
	if json.Unmarshal(in, &wi) != nil || json.Unmarshal(out, &wo) != nil {
		return nil // contents of an odd shape: nothing was replaced
	}
	if len(wi.Contents) != len(wo.Contents) {
		return fmt.Errorf("turns: %d in, %d out", len(wi.Contents), len(wo.Contents))
	}
	byPart := map[[2]int][]Replacement{}
	for _, r := range rep.Replacements {
		if len(r.Reference) > maxRefBytes {
			return fmt.Errorf("reference of %d bytes: %q", len(r.Reference), r.Reference)
		}
		if r.Bytes < opts.MinBlockBytes || r.RefBytes*2 > r.Bytes {
			return fmt.Errorf("replaced %d bytes by %d (min %d)", r.Bytes, r.RefBytes, opts.MinBlockBytes)
		}
		if !strings.Contains(r.Reference, "sha256:"+r.SHA256[:12]) {
			return fmt.Errorf("reference %q does not name %s", r.Reference, r.SHA256[:12])
		}
		k := [2]int{r.Turn, r.Part}
		byPart[k] = append(byPart[k], r)
	}
	for i := range wi.Contents {
		ci, co := wi.Contents[i], wo.Contents[i]
		if ci.Role != co.Role || len(ci.Parts) != len(co.Parts) {
			return fmt.Errorf("turn %d: structure changed", i)
		}
		for j := range ci.Parts {
			reps := byPart[[2]int{i, j}]
			if len(reps) == 0 {
				if !bytes.Equal(ci.Parts[j], co.Parts[j]) {
					return fmt.Errorf("turn %d part %d changed without a replacement", i, j)
				}
				continue
			}
			if reps[0].Rule == RuleImage {
				data, ok := partData(ci.Parts[j])
				if !ok || hexSHA(data) != reps[0].SHA256 {
					return fmt.Errorf("turn %d part %d: image hash mismatch", i, j)
				}
				if t, _ := wireText(co.Parts[j]); t != reps[0].Reference {
					return fmt.Errorf("turn %d part %d: image part became %q", i, j, t)
				}
				continue
			}
			if src := subSource(reps); src != "" {
				if !utf8.Valid(in) {
					// As below: encoding/json's decoding is not the
					// text whose spans were hashed (the audit checks
					// these bytes with its own decoder).
					continue
				}
				if err := checkSubPart(ci.Parts[j], co.Parts[j], src, reps); err != nil {
					return fmt.Errorf("turn %d part %d: %v", i, j, err)
				}
				continue
			}
			tin, ok1 := wireText(ci.Parts[j])
			tout, ok2 := wireText(co.Parts[j])
			if !ok1 || !ok2 {
				return fmt.Errorf("turn %d part %d: not a text part", i, j)
			}
			if tout == "" {
				return fmt.Errorf("turn %d part %d: empty part", i, j)
			}
			if !utf8.Valid(in) {
				// encoding/json turns invalid UTF-8 into U+FFFD, so its
				// decoded text is not the text whose spans were hashed.
				continue
			}
			if err := checkSpans(tin, tout, reps); err != nil {
				return fmt.Errorf("turn %d part %d: %v", i, j, err)
			}
		}
	}
	return nil
}

// checkSpans verifies that tout is tin with the replaced spans, in order,
// swapped for their references, and that each removed span hashes to the
// reported SHA-256.
func checkSpans(tin, tout string, reps []Replacement) error {
	ip, op := 0, 0
	for _, r := range reps {
		found := false
		for k := 0; ip+k <= len(tin) && op+k <= len(tout); k++ {
			if k > 0 && tin[ip+k-1] != tout[op+k-1] {
				break
			}
			if !strings.HasPrefix(tout[op+k:], r.Reference) || ip+k+r.Bytes > len(tin) {
				continue
			}
			if hexSHA([]byte(tin[ip+k:ip+k+r.Bytes])) != r.SHA256 {
				continue
			}
			ip, op, found = ip+k+r.Bytes, op+k+len(r.Reference), true
			break
		}
		if !found {
			return fmt.Errorf("reference %q: no removed span with hash %s", r.Reference, r.SHA256[:12])
		}
	}
	if tin[ip:] != tout[op:] {
		return fmt.Errorf("text after the last reference differs")
	}
	return nil
}

// checkDescription verifies the fields of rep that describe the rewritten
// request against a decoding of out, and ConversationID against in.
func checkDescription(in, out []byte, rep *Report) error {
	var bi, bo struct {
		Contents []json.RawMessage `json:"contents"`
	}
	if err := json.Unmarshal(in, &bi); err != nil {
		return fmt.Errorf("decoding input contents: %v", err)
	}
	if err := json.Unmarshal(out, &bo); err != nil {
		return fmt.Errorf("decoding output contents: %v", err)
	}
	wantConv := ""
	if len(bi.Contents) > 0 {
		raw := bi.Contents[0]
		var sum [sha256.Size]byte
		if len(raw) <= 512 {
			sum = sha256.Sum256(raw)
		} else {
			n := binary.BigEndian.AppendUint64(nil, uint64(len(raw)))
			sum = sha256.Sum256(slices.Concat(raw[:256], raw[len(raw)-256:], n))
		}
		wantConv = hex.EncodeToString(sum[:])
	}
	if got := rep.ConversationID(); got != wantConv {
		return fmt.Errorf("ConversationID %q, want %q", got, wantConv)
	}
	want, err := describeWire(out)
	if err != nil {
		return err
	}
	if rep.TextBytes != want.TextBytes || rep.OtherBytes != want.OtherBytes || rep.Contents != want.Contents || rep.Media != want.Media {
		return fmt.Errorf("description: text %d, other %d, contents %d, media %v; want %d, %d, %d, %v",
			rep.TextBytes, rep.OtherBytes, rep.Contents, rep.Media, want.TextBytes, want.OtherBytes, want.Contents, want.Media)
	}
	// The replacements' PromptBytes are what they took out of the
	// prompt's text and other bytes (the ledger prices them so), where
	// no turn was un-flattened and no image replaced.
	if rep.UnflattenedTurns > 0 || !utf8.Valid(in) {
		return nil
	}
	removed := 0
	for _, x := range rep.Replacements {
		if x.Rule == RuleImage {
			return nil
		}
		removed += x.PromptBytes - x.PromptRefBytes
	}
	before, err := describeWire(in)
	if err != nil {
		return err
	}
	if got := before.TextBytes + before.OtherBytes - want.TextBytes - want.OtherBytes; got != removed {
		return fmt.Errorf("replacements' PromptBytes - PromptRefBytes add up to %d, the prompt lost %d bytes", removed, got)
	}
	return nil
}

// describeWire returns the description of a request (Report.TextBytes,
// OtherBytes, Contents and Media) from a decoding of body.
func describeWire(body []byte) (Report, error) {
	var bo struct {
		Contents []json.RawMessage `json:"contents"`
	}
	if err := json.Unmarshal(body, &bo); err != nil {
		return Report{}, fmt.Errorf("decoding contents: %v", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return Report{}, err
	}
	var want Report
	want.Contents = len(bo.Contents)
	for _, k := range []string{"systemInstruction", "system_instruction", "tools", "toolConfig", "tool_config"} {
		want.OtherBytes += len(top[k])
	}
	_, want.Media = top["cachedContent"]
	for _, raw := range bo.Contents {
		var c struct {
			Parts []json.RawMessage `json:"parts"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return Report{}, err
		}
		for _, p := range c.Parts {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(p, &m); err != nil {
				return Report{}, err
			}
			var text string
			if _, ok := m["text"]; ok && len(m) == 1 && json.Unmarshal(m["text"], &text) == nil {
				want.TextBytes += len(text)
				continue
			}
			want.OtherBytes += len(p)
			for _, k := range []string{"inlineData", "inline_data", "fileData", "file_data"} {
				if _, ok := m[k]; ok {
					want.Media = true
				}
			}
		}
	}
	return want, nil
}
