package emulator

import (
	"log/slog"
	"net/http"
	"time"
)

// Options configures a Server. The zero value is a strict emulator serving
// the default models to any non-empty API key.
type Options struct {
	// ValidKeys, when non-empty, lists the only valid API keys (and Vertex
	// bearer tokens); otherwise any non-empty key is valid.
	ValidKeys []string
	// Lenient disables the unknown-field check. The zero value is strict, as
	// the real API is.
	Lenient bool
	// ImplicitCacheMinTokens, when positive, is the minimum repeated
	// prefix, in tokens, that implicit caching reports, for every model.
	// Zero means the per-model minimum of ImplicitCacheMinTokensByModel,
	// else DefaultImplicitCacheMinTokens.
	ImplicitCacheMinTokens int
	// ImplicitCacheMinTokensByModel overrides DefaultImplicitCacheMinTokens
	// for the listed model ids (after alias resolution); a value of zero or
	// less turns implicit caching off for that model.
	ImplicitCacheMinTokensByModel map[string]int
	// CacheMinTokens is the minimum size of an explicit cachedContents entry.
	// Zero means 1024; a negative value disables the check.
	CacheMinTokens int
	// CacheMinTokensByModel overrides CacheMinTokens for the listed model
	// ids (gemini-api.md §6.1: the minimum is model-dependent); a value of
	// zero or less disables the check for that model.
	CacheMinTokensByModel map[string]int
	// Reply scripts the answer text. Nil means the deterministic default reply.
	Reply func(ReplyRequest) string
	// Script scripts what the model decides beyond the text, for a
	// generateContent or streamGenerateContent request: calling functions,
	// blocking the prompt, stopping for safety (see Script). Nil, or a zero
	// Script, means the emulator decides from the request alone (doc.go,
	// "Answers").
	Script func(ReplyRequest) Script
	// Models lists the served model ids (without "models/"). Nil means
	// DefaultModels. Ids containing "embedding" are embedding models.
	Models []string
	// StreamChunkBytes is the approximate size of the text in one stream
	// chunk. Zero means 64.
	StreamChunkBytes int
	// Logger receives one debug record per request. Nil discards.
	Logger *slog.Logger
	// Now is the clock for TTLs, expiry and the implicit-cache window.
	// Nil means time.Now.
	Now func() time.Time
	// InteractionRetention is how long a stored interaction can be read or
	// continued after it was created (gemini-api.md §7.4: 55 days on the
	// paid tier, 1 day on the free tier). Zero means DefaultInteractionRetention.
	InteractionRetention time.Duration
	// UnknownPreviousStatus is the status of a create request whose
	// previous_interaction_id is unknown, expired, deleted, stored with
	// store=false or another key's: 404 (code "not_found") or 400 (code
	// "invalid_request"); §7.4 leaves it open. Zero means 404.
	UnknownPreviousStatus int
}

// DefaultInteractionRetention is the retention of stored interactions when
// Options.InteractionRetention is zero: the paid tier's 55 days.
const DefaultInteractionRetention = 55 * 24 * time.Hour

// DefaultModels are the model ids served when Options.Models is nil.
var DefaultModels = []string{
	"gemini-2.0-flash", "gemini-2.0-flash-lite",
	"gemini-2.5-flash", "gemini-2.5-pro", "gemini-2.5-flash-lite",
	"gemini-3-flash-preview", "gemini-3-pro-preview",
	"gemini-3.1-pro-preview", "gemini-3.1-flash-lite",
	"gemini-3.5-flash", "gemini-3.5-flash-lite",
	"gemini-flash-latest", "gemini-flash-lite-latest", "gemini-pro-latest",
	"gemini-embedding-001", "text-embedding-004",
}

// ReplyRequest is what Options.Reply sees of a generation request.
type ReplyRequest struct {
	// API is "generateContent", "streamGenerateContent" or "interactions".
	API string
	// Model is the bare model id, e.g. "gemini-2.5-flash".
	Model string
	// Contents is the effective conversation: the contents of a referenced
	// cachedContent first, then the request's contents (for interactions:
	// the stored history, then the new input).
	Contents []Content
	// SystemInstruction is the text of the system instruction (from the
	// request or the cachedContent), parts joined with "\n".
	SystemInstruction string
	// KeyID identifies the caller: the first 12 hex digits of SHA-256(key).
	KeyID string
	// Stream reports whether the answer is streamed.
	Stream bool
	// Functions are the names of the functions the request declares
	// (tools[].functionDeclarations), in order.
	Functions []string
}

// Script is a scripted decision of the model for one request. The zero
// Script scripts nothing.
type Script struct {
	// FunctionCalls, when non-empty, are answered as functionCall parts
	// (parallel calls, in order) instead of text. A call's Args, when nil,
	// are generated from the declaration's parameter schema; its ID, when
	// empty, is generated on Gemini 3 models, which send ids. The request
	// must declare each function (else the reply is text).
	FunctionCalls []FunctionCall
	// BlockReason, when set (e.g. "PROHIBITED_CONTENT", "SAFETY"), blocks
	// the prompt: promptFeedback.blockReason, no candidates, usage with
	// prompt tokens only.
	BlockReason string
	// FinishReason, when set to a reason other than STOP and MAX_TOKENS
	// (e.g. "SAFETY", "RECITATION"), ends the candidate with it, with no
	// content parts and, for SAFETY, safetyRatings marking the first
	// category blocked.
	FinishReason string
}

// LastUserText returns the text of the last user content, parts joined with
// "\n"; empty when there is none.
func (r ReplyRequest) LastUserText() string {
	for i := len(r.Contents) - 1; i >= 0; i-- {
		if c := r.Contents[i]; c.Role == "" || c.Role == "user" {
			if t := c.Text(); t != "" {
				return t
			}
		}
	}
	return ""
}

// Content is one parsed turn.
type Content struct {
	// Role is the role as sent; empty means the API default, "user".
	Role  string
	Parts []Part
}

// Text joins the content's text parts (not thoughts) with "\n".
func (c Content) Text() string {
	s := ""
	for _, p := range c.Parts {
		if p.Kind() == "text" && !p.Thought {
			if s != "" {
				s += "\n"
			}
			s += p.Text
		}
	}
	return s
}

// Part is one parsed part. Exactly one data field is set; Kind names it.
type Part struct {
	Text             string
	Thought          bool
	ThoughtSignature []byte
	InlineData       *Blob
	FileData         *FileData
	FunctionCall     *FunctionCall
	FunctionResponse *FunctionResponse
	// OtherKind and Other hold any other data field (executableCode,
	// codeExecutionResult, toolCall, toolResponse) as decoded JSON.
	OtherKind string
	Other     map[string]any
}

// Kind names the part's data field: "text", "inlineData", "fileData",
// "functionCall", "functionResponse" or OtherKind.
func (p Part) Kind() string {
	switch {
	case p.InlineData != nil:
		return "inlineData"
	case p.FileData != nil:
		return "fileData"
	case p.FunctionCall != nil:
		return "functionCall"
	case p.FunctionResponse != nil:
		return "functionResponse"
	case p.OtherKind != "":
		return p.OtherKind
	}
	return "text"
}

// Blob is inline media with its decoded bytes.
type Blob struct {
	MIMEType string
	Data     []byte
}

// FileData references a file by URI.
type FileData struct {
	MIMEType string
	FileURI  string
}

// FunctionCall is a model's function call.
type FunctionCall struct {
	ID   string
	Name string
	Args map[string]any
}

// FunctionResponse is a client's function result.
type FunctionResponse struct {
	ID       string
	Name     string
	Response map[string]any
}

// Usage mirrors usageMetadata (for interactions: the usage object mapped to
// the same names).
type Usage struct {
	PromptTokenCount        int
	CachedContentTokenCount int
	CandidatesTokenCount    int
	ThoughtsTokenCount      int
	ToolUsePromptTokenCount int
	TotalTokenCount         int
}

// Received is one request the server received on a generation route.
type Received struct {
	Method string
	// Path is the URL path including the version, e.g.
	// "/v1beta/models/gemini-2.5-flash:generateContent".
	Path     string
	RawQuery string
	Header   http.Header
	// API is "generateContent", "streamGenerateContent", "countTokens" or
	// "interactions".
	API    string
	Model  string
	Stream bool
	// SSE reports alt=sse framing; a stream without it is a JSON array.
	SSE    bool
	Vertex bool
	KeyID  string
	// Body is the raw request body.
	Body              []byte
	Contents          []Content
	SystemInstruction *Content
	CachedContent     string
	// Status is the HTTP status the server answered with.
	Status int
	// Error is the error message when Status is not 200.
	Error string
	// Usage is the final usageMetadata of the answer (countTokens: the
	// totalTokens in PromptTokenCount and TotalTokenCount).
	Usage Usage
	// Reply is the answer text (before any maxOutputTokens truncation).
	Reply string
	Time  time.Time
}

// Fault makes the server misbehave for matching requests.
type Fault struct {
	// Status, when non-zero, answers with this HTTP status and a
	// Gemini-shaped error body (status enum derived from the code).
	Status int
	// Message overrides the error message.
	Message string
	// RetryAfter (e.g. "3") sets the Retry-After header and a
	// google.rpc.RetryInfo detail on the error.
	RetryAfter string
	// HeaderDelay is slept before the response headers are written.
	HeaderDelay time.Duration
	// ChunkDelay is slept between stream chunks.
	ChunkDelay time.Duration
	// DisconnectAfterChunks, when positive, closes the connection after that
	// many stream chunks without ending the response properly. On unary
	// responses any positive value cuts the body in half.
	DisconnectAfterChunks int
	// Times limits the fault to the next Times matching requests; zero
	// means until cleared.
	Times int
	// Match selects the requests the fault applies to; nil matches every
	// API request.
	Match func(*http.Request) bool
}
