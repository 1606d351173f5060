package proxy

import "strings"

// SDK is the closed set of client SDK families, recognised from the
// x-goog-api-client header (gemini-api.md §2.2).
type SDK string

// Client SDK families.
const (
	SDKGenAIGo            SDK = "google-genai-go"
	SDKGenAIPython        SDK = "google-genai-python"
	SDKGenAIJS            SDK = "google-genai-js"
	SDKGenerativeAIJS     SDK = "generative-ai-js"     // deprecated @google/generative-ai
	SDKGenerativeAIPython SDK = "generative-ai-python" // deprecated google-generativeai
	SDKGenerativeAIGo     SDK = "generative-ai-go"     // deprecated github.com/google/generative-ai-go
	SDKOther              SDK = "other"
	SDKNone               SDK = "none"
)

// Deprecated reports whether the SDK family is one of the deprecated
// pre-google-genai SDKs.
func (s SDK) Deprecated() bool {
	switch s {
	case SDKGenerativeAIJS, SDKGenerativeAIPython, SDKGenerativeAIGo:
		return true
	}
	return false
}

// clientSDK classifies an x-goog-api-client header value.
func clientSDK(h string) SDK {
	if h == "" {
		return SDKNone
	}
	has := func(tok string) bool {
		for f := range strings.FieldsSeq(h) {
			if strings.HasPrefix(f, tok) {
				return true
			}
		}
		return false
	}
	switch {
	case has("google-genai-sdk/"):
		switch {
		case has("gl-go/"):
			return SDKGenAIGo
		case has("gl-python/"):
			return SDKGenAIPython
		case has("gl-node/"):
			return SDKGenAIJS
		}
		return SDKOther
	case has("genai-js/"):
		return SDKGenerativeAIJS
	case has("genai-py/"):
		return SDKGenerativeAIPython
	case has("gccl/") && has("gl-go/"):
		return SDKGenerativeAIGo
	}
	return SDKOther
}
