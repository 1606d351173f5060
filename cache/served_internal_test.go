package cache

import (
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// TestRecordServedEntries checks the entries RecordServed writes against
// their definition: the record under the SHA-256 of the normalised text,
// holding the flag and (from MinPrefixBytes) that text, and the id in the
// candidate list of the SHA-256 of each prefix cut, computed here one hash
// per cut.
func TestRecordServedEntries(t *testing.T) {
	const tenant = "t1"
	for _, tc := range []struct {
		name      string
		text      string
		truncated bool
	}{
		{"short", "a short answer", false},
		{"short truncated", "a short  answer\n", true},
		{"exactly 64", strings.Repeat("b", 64), false},
		{"white space", "  " + strings.Repeat("word \n\t ", 400) + " ", false},
		{"multi-byte at cuts", strings.Repeat("é", 3000), true},
		{"unicode spaces", strings.Repeat("x\u00a0y\u2003", 1500), false},
		{"long", strings.Repeat("0123456789abcdef ", 20000), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Options{MaxBytes: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.RecordServed(tenant, tc.text, tc.truncated)
			s.Wait()

			n := normalize(tc.text)
			id := sha256.Sum256([]byte(n))
			want := []byte{flagEnd}
			trail := tc.text[len(strings.TrimRightFunc(tc.text, unicode.IsSpace)):]
			switch {
			case tc.truncated:
				want[0] = flagTruncated
			case trail != "":
				want = append([]byte{flagEnd | flagTrail, byte(len(trail))}, trail...)
			}
			if len(n) >= MinPrefixBytes {
				want = append(want, n...)
			}
			got, ok := s.Get(AreaServed, tenant, kindRecord+string(id[:]))
			if !ok {
				t.Fatalf("no record under the hash of the normalised text")
			}
			if !cmp.Equal(got, want) {
				t.Errorf("record = %.80q…, want %.80q…", got, want)
			}
			cuts := 0
			for _, c := range prefixCuts {
				if c >= len(n) {
					break
				}
				cuts++
				p := sha256.Sum256([]byte(n[:cutAt(n, c)]))
				list, ok := s.Get(AreaServed, tenant, kindPrefix+string(p[:]))
				if !ok || !containsID(list, id[:]) {
					t.Errorf("cut %d: id not in the candidate list of the prefix hash", c)
				}
			}
			if tc.name == "long" && cuts != len(prefixCuts) {
				t.Errorf("long text indexed %d cuts, want %d", cuts, len(prefixCuts))
			}
			if !s.Verifier(tenant).Served(tc.text) {
				t.Errorf("Served(text) = false after RecordServed")
			}
		})
	}
}

func BenchmarkRecordServed(b *testing.B) {
	s, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	text := strings.Repeat("The difference is ownership of the backing storage.\n\n", 30)
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		s.RecordServed("tenant", text, false)
	}
}

// BenchmarkRecordServedNew records a new 64 KB answer each time (its first
// bytes differ), so that every prefix cut's candidate list is a new key, as
// in traffic, where an answer is rarely served twice.
//
//	go test ./cache -run '^$' -bench RecordServedNew -benchmem
func BenchmarkRecordServedNew(b *testing.B) {
	s, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	body := strings.Repeat("The difference is ownership of the backing storage.\n\n", 64<<10/54)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	i := 0
	for b.Loop() {
		i++
		s.RecordServed("tenant", strconv.Itoa(i)+" "+body, false)
	}
}

// TestRecordServedBackToBack records two new answers sharing their first
// 5,000 bytes right after each other, many times: each shared prefix's
// candidate list must hold both, so the first answer's new lists must be
// visible to the second's read-modify-write (ristretto applies a new key
// asynchronously) however the writes of one answer are grouped.
func TestRecordServedBackToBack(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := s.areas[AreaServed]
	for i := range 300 {
		common := strconv.Itoa(i) + strings.Repeat(" shared words", 400)
		s.RecordServed("t", common+" and then the first answer", false)
		s.RecordServed("t", common+" and then another", false)
		for _, c := range []int{64, 256, 1024, 4096} {
			p := digest(sha256.Sum256([]byte(common[:c])))
			list, _ := a.get(idKey("t", kindPrefix, p))
			if len(list) != 2*sha256.Size {
				t.Fatalf("round %d: the list of prefix cut %d holds %d ids, want 2", i, c, len(list)/sha256.Size)
			}
		}
	}
}
