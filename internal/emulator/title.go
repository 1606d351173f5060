package emulator

import "strings"

// titleASCII upper-cases the first letter of each space-separated word of
// s. Model ids are ASCII, so the Unicode word rules of golang.org/x/text
// are not needed.
func titleASCII(s string) string {
	words := strings.Split(s, " ")
	for i, w := range words {
		if w != "" && w[0] >= 'a' && w[0] <= 'z' {
			words[i] = string(w[0]-'a'+'A') + w[1:]
		}
	}
	return strings.Join(words, " ")
}
