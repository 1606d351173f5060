package proxy

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadBody(t *testing.T) {
	const body = "0123456789"
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		r     func() io.Reader
		size  int64
		limit int64
		want  string
		err   error
	}{
		{"known", func() io.Reader { return &countingBody{rc: io.NopCloser(strings.NewReader(body)), size: 10} }, 10, 100, body, nil},
		{"known one byte at a time", func() io.Reader {
			return &countingBody{rc: io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), size: 10}
		}, 10, 100, body, nil},
		{"empty", func() io.Reader { return &countingBody{rc: io.NopCloser(strings.NewReader("")), size: 0} }, 0, 100, "", nil},
		{"unknown", func() io.Reader { return strings.NewReader(body) }, -1, 100, body, nil},
		{"unknown over limit", func() io.Reader { return strings.NewReader(body) }, -1, 4, "01234", nil},
		{"no EOF with the last byte", func() io.Reader { return strings.NewReader(body) }, 10, 100, body, nil},
		{"longer than announced", func() io.Reader { return strings.NewReader(body) }, 4, 6, "0123456", nil},
		{"shorter than announced", func() io.Reader { return strings.NewReader(body) }, 20, 100, body, nil},
		{"error", func() io.Reader { return io.MultiReader(strings.NewReader("01"), iotest.ErrReader(errBoom)) }, 10, 100, "01", errBoom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readBody(tc.r(), tc.size, tc.limit)
			if string(got) != tc.want || !errors.Is(err, tc.err) {
				t.Errorf("readBody = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			// The reference: what prepareRewrite read before.
			ref, rerr := io.ReadAll(io.LimitReader(tc.r(), tc.limit+1))
			if string(got) != string(ref) || !errors.Is(err, rerr) && !errors.Is(rerr, err) {
				t.Errorf("readBody = %q, %v; io.ReadAll read %q, %v", got, err, ref, rerr)
			}
		})
	}
}
