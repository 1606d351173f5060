package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
)

// imageSteps re-send the same inline image in three of four turns.
var imageSteps = []step{
	{question: "What is in this picture?", image: true, noFile: true},
	{question: "Describe its colours.", noFile: true},
	{question: "Here it is again. Is it the same picture?", image: true, noFile: true},
	{question: "And once more: anything new?", image: true, noFile: true},
}

func TestRewriteRepeatedImage(t *testing.T) {
	t.Parallel()
	p, d, x := runPair(t, "gemini-2.5-flash", imageSteps, false)
	refs := compareSessions(t, p, d, x)
	if diff := cmp.Diff([]int{0, 0, 1, 2}, refs); diff != "" {
		t.Errorf("image references per turn (-want +got):\n%s", diff)
	}
	if rep := x.turns[3].report; !strings.Contains(rep, "image=2") {
		t.Errorf("turn 4 report %q, want image=2", rep)
	}
}

// TestRewriteImageURLSafe sends the same image as standard base64 in one
// turn and as URL-safe base64 in another, with raw HTTP (the SDK always
// encodes standard base64): the proxy must see one image.
func TestRewriteImageURLSafe(t *testing.T) {
	t.Parallel()
	img := testImage()
	std, safe := base64.StdEncoding.EncodeToString(img), base64.RawURLEncoding.EncodeToString(img)
	if !strings.ContainsAny(std, "+/") || std == safe {
		t.Fatal("test image does not exercise URL-safe base64")
	}
	body := `{"contents":[` +
		`{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"` + std + `"}},{"text":"What is this?"}]},` +
		`{"role":"model","parts":[{"text":"A picture of noise."}]},` +
		`{"role":"user","parts":[{"inline_data":{"mime_type":"image/png","data":"` + safe + `"}},{"text":"And this one?"}]}]}`
	p := newPair(t, emulator.Options{Reply: scriptReply})
	post := func(base string) (string, http.Header) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-goog-api-key", testKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("POST %s: %d %v: %s", base, res.StatusCode, err, raw)
		}
		var resp struct {
			Candidates []struct {
				Content struct {
					Parts []struct{ Text string }
				}
			}
		}
		if err := json.Unmarshal(raw, &resp); err != nil || len(resp.Candidates) == 0 {
			t.Fatalf("decoding %s: %v", raw, err)
		}
		var sb strings.Builder
		for _, pt := range resp.Candidates[0].Content.Parts {
			sb.WriteString(pt.Text)
		}
		return sb.String(), res.Header
	}
	want, _ := post(p.direct.emuURL)
	got, h := post(p.proxied.proxyURL)
	if got != want {
		t.Errorf("answer through the proxy %q, direct %q", got, want)
	}
	if !strings.Contains(want, sha12(img)) {
		t.Errorf("direct answer %q does not name the image's hash", want)
	}
	if rep := h.Get(reportHdr); !strings.Contains(rep, "image=1") {
		t.Errorf("%s = %q, want image=1", reportHdr, rep)
	}
	rec := p.proxied.emu.Received()
	if len(rec) != 1 {
		t.Fatalf("emulator received %d requests through the proxy, want 1", len(rec))
	}
	c := rec[0].Contents
	if len(c) != 3 || c[0].Parts[0].InlineData == nil || !bytes.Equal(c[0].Parts[0].InlineData.Data, img) {
		t.Fatalf("first image did not reach the emulator intact")
	}
	wantRef := "[same image/png sha256:" + sha12(img) + " as in turn 1]" // rewrite package doc: "as WHERE", WHERE = "in turn N"
	if got := c[2].Parts[0].Text; got != wantRef {
		t.Errorf("repeated URL-safe image upstream = %q, want %q", got, wantRef)
	}
	if c[2].Parts[1].Text != "And this one?" {
		t.Errorf("text after the image = %q", c[2].Parts[1].Text)
	}
}
