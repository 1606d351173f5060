package emulator_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

const interactionsPath = "/v1beta/interactions"

// TestInteractionPrevious: continuing works while the previous interaction
// is stored; an unknown, expired, deleted, store=false or other key's id
// is rejected with the configured status, and a chain that lost a member
// cannot be continued.
func TestInteractionPrevious(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	for _, status := range []int{0, 404, 400} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			srv, ts := testutil.StartEmulator(t, emulator.Options{Now: clock, InteractionRetention: time.Hour, UnknownPreviousStatus: status})
			wantStatus, wantCode := 404, "not_found"
			if status == 400 {
				wantStatus, wantCode = 400, "invalid_request"
			}
			create := func(prev string, store bool, key string) (int, map[string]any) {
				t.Helper()
				body := fmt.Sprintf(`{"model":"gemini-2.5-flash","input":"hello","store":%v`, store)
				if prev != "" {
					body += fmt.Sprintf(`,"previous_interaction_id":%q`, prev)
				}
				body += "}"
				hdr := map[string]string{}
				if key != "" {
					hdr["x-goog-api-key"] = key
				}
				resp, b := do(t, ts, http.MethodPost, interactionsPath, body, hdr)
				var m map[string]any
				if err := json.Unmarshal(b, &m); err != nil {
					t.Fatalf("decoding %s: %v", b, err)
				}
				return resp.StatusCode, m
			}
			id := func(m map[string]any) string { s, _ := m["id"].(string); return s }
			wantErr := func(name string, code int, m map[string]any) {
				t.Helper()
				e, _ := m["error"].(map[string]any)
				if code != wantStatus || e == nil || e["code"] != wantCode {
					t.Errorf("%s: status %d, body %v; want %d with code %q", name, code, m, wantStatus, wantCode)
				}
			}

			code, first := create("", true, "")
			if code != 200 || id(first) == "" {
				t.Fatalf("create: %d %v", code, first)
			}
			code, second := create(id(first), true, "")
			if code != 200 {
				t.Fatalf("continue: %d %v", code, second)
			}
			code, m := create("v1_unknown", true, "")
			wantErr("unknown", code, m)
			code, m = create(id(first), true, "other-key")
			wantErr("other key", code, m)

			code, unstored := create("", false, "")
			if code != 200 || id(unstored) == "" {
				t.Fatalf("store=false create: %d %v", code, unstored)
			}
			code, m = create(id(unstored), true, "")
			wantErr("store=false", code, m)
			if resp, _ := do(t, ts, http.MethodGet, interactionsPath+"/"+id(unstored), "", nil); resp.StatusCode != 404 {
				t.Errorf("GET of a store=false interaction: %d, want 404", resp.StatusCode)
			}

			// Deleting the first interaction breaks the chain of the second.
			if resp, _ := do(t, ts, http.MethodDelete, interactionsPath+"/"+id(first), "", nil); resp.StatusCode != 200 {
				t.Fatalf("DELETE: %d", resp.StatusCode)
			}
			code, m = create(id(second), true, "")
			wantErr("chain lost a member", code, m)

			// Retention: usable just before, gone at the limit.
			code, fresh := create("", true, "")
			if code != 200 {
				t.Fatal(code)
			}
			advance(time.Hour - time.Second)
			if code, m := create(id(fresh), true, ""); code != 200 {
				t.Errorf("continue before retention ended: %d %v", code, m)
			}
			advance(time.Second)
			code, m = create(id(fresh), true, "")
			wantErr("expired", code, m)
			if resp, _ := do(t, ts, http.MethodGet, interactionsPath+"/"+id(fresh), "", nil); resp.StatusCode != 404 {
				t.Errorf("GET of an expired interaction: %d, want 404", resp.StatusCode)
			}

			code, last := create("", true, "")
			if code != 200 {
				t.Fatal(code)
			}
			if n := srv.DeleteInteractions(); n == 0 {
				t.Error("DeleteInteractions removed nothing")
			}
			code, m = create(id(last), true, "")
			wantErr("after DeleteInteractions", code, m)
		})
	}
}
