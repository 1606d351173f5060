package config

import (
	"fmt"
	"io"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Write prints c as YAML with every key, secrets redacted, so that the
// output can be used as a configuration file (secrets aside).
func (c Config) Write(w io.Writer) error {
	var b strings.Builder
	var section []string
	walk(reflect.ValueOf(c), "", func(key string, v reflect.Value) {
		parts := strings.Split(key, ".")
		// Open the sections this key needs that are not open yet.
		common := 0
		for common < len(section) && common < len(parts)-1 && section[common] == parts[common] {
			common++
		}
		for i := common; i < len(parts)-1; i++ {
			fmt.Fprintf(&b, "%s%s:\n", strings.Repeat("  ", i), parts[i])
		}
		section = parts[:len(parts)-1]
		indent := strings.Repeat("  ", len(parts)-1)
		fmt.Fprintf(&b, "%s%s: %s\n", indent, parts[len(parts)-1], yamlValue(key, v))
	})
	_, err := io.WriteString(w, b.String())
	return err
}

func yamlValue(key string, v reflect.Value) string {
	if secretKeys[key] {
		if v.String() == "" {
			return `""`
		}
		return `"REDACTED"`
	}
	if redactedURLKeys[key] {
		if u, err := url.Parse(v.String()); err == nil {
			// A Sentinel URL may carry the master's password as a query
			// parameter (go-redis ParseFailoverURL).
			if q := u.Query(); q.Has("password") {
				q.Set("password", "xxxxx")
				u.RawQuery = q.Encode()
			}
			return strconv.Quote(u.Redacted())
		}
		return `"REDACTED"`
	}
	switch x := v.Interface().(type) {
	case []Price:
		items := make([]string, len(x))
		for i, p := range x {
			items[i] = fmt.Sprintf("\n%s  - {model: %q, input: %v, cached_input: %v, output: %v, checked: %q, storage: %v}",
				strings.Repeat("  ", strings.Count(key, ".")), p.Model, p.Input, p.CachedInput, p.Output, p.Checked, p.Storage)
		}
		if len(items) == 0 {
			return "[]"
		}
		return strings.Join(items, "")
	case []ModelTokens:
		items := make([]string, len(x))
		for i, mt := range x {
			items[i] = fmt.Sprintf("\n%s  - {model: %q, tokens: %d}", strings.Repeat("  ", strings.Count(key, ".")), mt.Model, mt.Tokens)
		}
		if len(items) == 0 {
			return "[]"
		}
		return strings.Join(items, "")
	case ByteSize:
		return x.String()
	case time.Duration:
		return x.String()
	case string:
		return strconv.Quote(x)
	case []string:
		q := make([]string, len(x))
		for i, s := range x {
			q[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return fmt.Sprint(v.Interface())
}
