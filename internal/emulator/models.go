package emulator

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"strings"
)

type modelJSON struct {
	Name                       string   `json:"name"`
	Version                    string   `json:"version"`
	DisplayName                string   `json:"displayName"`
	Description                string   `json:"description"`
	InputTokenLimit            int      `json:"inputTokenLimit"`
	OutputTokenLimit           int      `json:"outputTokenLimit"`
	SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
	Temperature                *float64 `json:"temperature,omitempty"`
	TopP                       *float64 `json:"topP,omitempty"`
	TopK                       *int     `json:"topK,omitempty"`
	MaxTemperature             *float64 `json:"maxTemperature,omitempty"`
	Thinking                   bool     `json:"thinking,omitempty"`
}

func (s *Server) modelInfo(id string, vertex bool) modelJSON {
	name := "models/" + id
	if vertex {
		name = "publishers/google/models/" + id
	}
	display := titleASCII(strings.ReplaceAll(id, "-", " "))
	if isEmbedding(id) {
		return modelJSON{Name: name, Version: "001", DisplayName: display,
			Description: "Emulated embedding model.", InputTokenLimit: 2048, OutputTokenLimit: 1,
			SupportedGenerationMethods: []string{"embedContent", "countTextTokens", "countTokens", "batchEmbedContents"}}
	}
	t, p, mt, k := 1.0, 0.95, 2.0, 64
	return modelJSON{Name: name, Version: "001", DisplayName: display,
		Description: "Emulated " + display + " model (deterministic replies).", InputTokenLimit: 1048576,
		OutputTokenLimit:           65536,
		SupportedGenerationMethods: []string{"generateContent", "countTokens", "createCachedContent", "batchGenerateContent"},
		Temperature:                &t, TopP: &p, TopK: &k, MaxTemperature: &mt,
		Thinking: !strings.HasPrefix(id, "gemini-2.0") && strings.HasPrefix(id, "gemini-")}
}

func (s *Server) listModels(c *call) {
	page, next, e := paginate(c.r, len(s.order), 50, 1000)
	if e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	items := make([]modelJSON, 0, len(page))
	for _, i := range page {
		items = append(items, s.modelInfo(s.order[i], false))
	}
	out := map[string]any{"models": items}
	if next != "" {
		out["nextPageToken"] = next
	}
	b, _ := marshalIndent(out)
	writeJSON(c.w, c.r, 200, append(b, '\n'))
}

func (s *Server) getModel(c *call, id string) {
	if !s.models[id] {
		e := newError(404, fmt.Sprintf("models/%s is not found for API version %s, or is not supported for getModel. Call ListModels to see the list of available models and their supported methods.", id, c.version))
		if c.vertex {
			e = s.modelError(c, id, "getModel")
		}
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	b, _ := marshalIndent(s.modelInfo(id, c.vertex))
	writeJSON(c.w, c.r, 200, append(b, '\n'))
}

// embed serves :embedContent and :batchEmbedContents with deterministic
// unit vectors derived from SHA-256 of the content text.
func (s *Server) embed(c *call, model, method string) {
	_, v, e := readBody(c)
	if e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	if !s.models[model] || !isEmbedding(model) {
		writeError(c.w, c.r, s.modelError(c, model, method), modeUnary)
		return
	}
	if method == "embedContent" {
		norm, e := s.validator(c).message(v, msgEmbed, "")
		if e != nil {
			writeError(c.w, c.r, e, modeUnary)
			return
		}
		vec, e := s.embedOne(c, model, norm, "EmbedContentRequest")
		if e != nil {
			writeError(c.w, c.r, e, modeUnary)
			return
		}
		b, _ := marshalIndent(map[string]any{"embedding": map[string]any{"values": vec}})
		writeJSON(c.w, c.r, 200, append(b, '\n'))
		return
	}
	norm, e := s.validator(c).message(v, msgBatchEmbed, "")
	if e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	reqs, _ := norm["requests"].([]any)
	if len(reqs) == 0 {
		writeError(c.w, c.r, errInvalid("* BatchEmbedContentsRequest.requests: requests is not specified\n"), modeUnary)
		return
	}
	if len(reqs) > 100 {
		writeError(c.w, c.r, errInvalid("* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch\n"), modeUnary)
		return
	}
	var embs []any
	for i, r := range reqs {
		m, _ := r.(map[string]any)
		if name, _ := m["model"].(string); name != "models/"+model {
			writeError(c.w, c.r, errInvalid(fmt.Sprintf("* BatchEmbedContentsRequest.requests[%d].model: the model %q does not match the batch model models/%s\n", i, name, model)), modeUnary)
			return
		}
		vec, e := s.embedOne(c, model, m, fmt.Sprintf("BatchEmbedContentsRequest.requests[%d]", i))
		if e != nil {
			writeError(c.w, c.r, e, modeUnary)
			return
		}
		embs = append(embs, map[string]any{"values": vec})
	}
	b, _ := marshalIndent(map[string]any{"embeddings": embs})
	writeJSON(c.w, c.r, 200, append(b, '\n'))
}

func (s *Server) embedOne(c *call, model string, m map[string]any, where string) ([]float32, *apiError) {
	cm, ok := m["content"].(map[string]any)
	if !ok {
		return nil, errInvalid(fmt.Sprintf("* %s.content: content is not specified\n", where))
	}
	ct := toContent(cm)
	if e := s.checkParts(c, ct.Parts, where, "content"); e != nil {
		return nil, e
	}
	dim := 768
	if strings.HasPrefix(model, "gemini-embedding") {
		dim = 3072
	}
	if v, ok := m["outputDimensionality"]; ok {
		d := toInt(v)
		if d <= 0 || d > dim {
			return nil, errInvalid(fmt.Sprintf("* %s.output_dimensionality: must be between 1 and %d\n", where, dim))
		}
		dim = d
	}
	title, _ := m["title"].(string)
	return Embedding(model+"\x00"+title+"\x00"+ct.Text(), dim), nil
}

// Embedding is the deterministic unit vector the emulator returns for text.
func Embedding(text string, dim int) []float32 {
	out := make([]float32, dim)
	var sq float64
	seed := sha256.Sum256([]byte(text))
	block := seed
	for i := 0; i < dim; i++ {
		if i%8 == 0 && i > 0 {
			block = sha256.Sum256(append(seed[:], block[:]...))
		}
		u := binary.BigEndian.Uint32(block[(i%8)*4:])
		x := float64(u)/math.MaxUint32*2 - 1
		out[i] = float32(x)
		sq += x * x
	}
	n := math.Sqrt(sq)
	for i := range out {
		out[i] = float32(float64(out[i]) / n)
	}
	return out
}

var _ = http.MethodGet
