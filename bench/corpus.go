package bench

import (
	"embed"
	"fmt"
)

//go:embed corpus
var corpusFS embed.FS

// Document returns the corpus file name (see corpus/README.md). It panics
// when the file is missing: the corpus is embedded, so that is a build
// mistake.
func Document(name string) string {
	b, err := corpusFS.ReadFile("corpus/" + name)
	if err != nil {
		panic(fmt.Sprintf("bench: corpus file %q: %v", name, err))
	}
	return string(b)
}
