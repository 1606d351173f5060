package emulator

import (
	"encoding/json"
	"strings"
	"unicode"
)

// ImageTokens is the fixed token count of one image or other binary media part.
const ImageTokens = 258

// CountTokens is the emulator's deterministic tokenizer. The text is split
// into runs and each run is priced:
//   - a word (letters, plus '_' and apostrophes inside it) of n runes costs 1
//     token up to 6 runes and 1 more per started 4 runes beyond that;
//   - every digit costs 1 token (Gemma tokenizes digits one by one);
//   - a run of punctuation/symbols of n runes costs ceil(n/2) tokens;
//   - a single space costs nothing (it belongs to the next word); any other
//     whitespace run (newlines, indentation, tabs) costs 1 token;
//   - every Han, Hiragana, Katakana or Hangul rune, and every other rune
//     (emoji, …), costs 1 token.
//
// This gives ≈4.4 characters per token on English prose and ≈3.3 on source
// code, close to the Gemma 3 tokenizer the API uses (see gemini-api.md §8.3).
func CountTokens(text string) int {
	n := 0
	rs := []rune(text)
	for i := 0; i < len(rs); {
		c := rs[i]
		switch {
		case isWordRune(c):
			j := i
			for j < len(rs) && (isWordRune(rs[j]) || (rs[j] == '\'' && j+1 < len(rs) && isWordRune(rs[j+1]) && j > i)) {
				j++
			}
			n += wordTokens(j - i)
			i = j
		case unicode.IsDigit(c):
			n++
			i++
		case unicode.IsSpace(c):
			j := i
			for j < len(rs) && unicode.IsSpace(rs[j]) {
				j++
			}
			if !(j-i == 1 && c == ' ') {
				n++
			}
			i = j
		case c < 128 && (unicode.IsPunct(c) || unicode.IsSymbol(c)):
			j := i
			for j < len(rs) && rs[j] < 128 && (unicode.IsPunct(rs[j]) || unicode.IsSymbol(rs[j])) {
				j++
			}
			n += (j - i + 1) / 2
			i = j
		default:
			n++
			i++
		}
	}
	return n
}

func isWordRune(c rune) bool {
	if c == '_' {
		return true
	}
	if !unicode.IsLetter(c) {
		return false
	}
	return !unicode.In(c, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

func wordTokens(n int) int {
	if n <= 6 {
		return 1
	}
	return 1 + (n-6+3)/4
}

// modalityCounts are prompt token counts split by modality.
type modalityCounts map[string]int

func (m modalityCounts) add(o modalityCounts) {
	for k, v := range o {
		m[k] += v
	}
}

func (m modalityCounts) total() int {
	t := 0
	for _, v := range m {
		t += v
	}
	return t
}

// details renders promptTokensDetails in a stable modality order.
func (m modalityCounts) details() []modalityTokens {
	var out []modalityTokens
	for _, k := range []string{"TEXT", "IMAGE", "VIDEO", "AUDIO", "DOCUMENT"} {
		if v, ok := m[k]; ok && v > 0 {
			out = append(out, modalityTokens{Modality: k, TokenCount: v})
		}
	}
	return out
}

type modalityTokens struct {
	Modality   string `json:"modality"`
	TokenCount int    `json:"tokenCount"`
}

// mediaModality maps a MIME type to the API's modality name.
func mediaModality(mime string) string {
	switch {
	case strings.HasPrefix(mime, "image/"):
		return "IMAGE"
	case strings.HasPrefix(mime, "video/"):
		return "VIDEO"
	case strings.HasPrefix(mime, "audio/"):
		return "AUDIO"
	case strings.HasPrefix(mime, "text/"), mime == "application/json":
		return "TEXT"
	}
	return "DOCUMENT"
}

// partTokens prices one part. Text-like media (text/*, JSON) are tokenized,
// other media cost ImageTokens each. fileSize looks up text files by URI.
func partTokens(p Part, fileText func(uri string) (string, string, bool)) modalityCounts {
	m := modalityCounts{}
	switch {
	case p.InlineData != nil:
		mod := mediaModality(p.InlineData.MIMEType)
		if mod == "TEXT" {
			m["TEXT"] += CountTokens(string(p.InlineData.Data))
		} else {
			m[mod] += ImageTokens
		}
	case p.FileData != nil:
		mime := p.FileData.MIMEType
		text, fmime, ok := "", "", false
		if fileText != nil {
			text, fmime, ok = fileText(p.FileData.FileURI)
		}
		if mime == "" {
			mime = fmime
		}
		mod := mediaModality(mime)
		if ok && mod == "TEXT" {
			m["TEXT"] += CountTokens(text)
		} else {
			m[mod] += ImageTokens
		}
	case p.FunctionCall != nil:
		m["TEXT"] += CountTokens(p.FunctionCall.Name) + jsonTokens(p.FunctionCall.Args)
	case p.FunctionResponse != nil:
		m["TEXT"] += CountTokens(p.FunctionResponse.Name) + jsonTokens(p.FunctionResponse.Response)
	case p.Other != nil:
		m["TEXT"] += jsonTokens(p.Other)
	default:
		m["TEXT"] += CountTokens(p.Text)
	}
	return m
}

func jsonTokens(v any) int {
	if v == nil {
		return 0
	}
	b, _ := json.Marshal(v)
	return CountTokens(string(b))
}

// contentsTokens prices contents: the parts plus one role token per content,
// as the API's countTokens does.
func contentsTokens(cs []Content, fileText func(string) (string, string, bool)) modalityCounts {
	m := modalityCounts{}
	for _, c := range cs {
		m["TEXT"]++
		for _, p := range c.Parts {
			m.add(partTokens(p, fileText))
		}
	}
	return m
}
