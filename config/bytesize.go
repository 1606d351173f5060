package config

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes. In YAML and the environment it is written as a
// plain number of bytes or with a unit: B, KB, MB, GB (powers of 1000) or KiB,
// MiB, GiB (powers of 1024).
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first so that "KiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"B", 1},
}

// ParseByteSize parses s as a ByteSize.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q: want bytes or a number with KiB, MiB, GiB, KB, MB, GB", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return ByteSize(n * mult), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// String formats b with the largest binary unit that divides it.
func (b ByteSize) String() string {
	switch {
	case b != 0 && b%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", b>>30)
	case b != 0 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b != 0 && b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return strconv.FormatInt(int64(b), 10)
}
