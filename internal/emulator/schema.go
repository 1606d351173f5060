package emulator

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// kind is the proto3-JSON type of a request field.
type kind int

const (
	kString kind = iota
	kBool
	kInt
	kNumber
	kBytes
	kEnum
	kMessage
	kStruct    // google.protobuf.Struct: any JSON object, not checked
	kValue     // google.protobuf.Value: any JSON value, not checked
	kDuration  // "3.5s"
	kTimestamp // RFC 3339
	kStringMap // map<string,string>
)

// backend restricts a field to one API surface.
type backend int

const (
	both backend = iota
	geminiOnly
	vertexOnly
)

type field struct {
	kind     kind
	repeated bool
	msg      *message
	enum     *enumType
	only     backend
}

type enumType struct {
	name   string
	values map[string]bool
}

type message struct {
	name   string
	fields map[string]*field // lowerCamelCase key
	oneofs map[string][]string
}

const protoPkg = "type.googleapis.com/google.ai.generativelanguage.v1beta."

func enum(name string, values ...string) *enumType {
	e := &enumType{name: name, values: map[string]bool{}}
	for _, v := range values {
		e.values[v] = true
	}
	return e
}

func f(k kind) *field                 { return &field{kind: k} }
func rep(k kind) *field               { return &field{kind: k, repeated: true} }
func msgF(m *message) *field          { return &field{kind: kMessage, msg: m} }
func repMsg(m *message) *field        { return &field{kind: kMessage, msg: m, repeated: true} }
func enumF(e *enumType) *field        { return &field{kind: kEnum, enum: e} }
func repEnum(e *enumType) *field      { return &field{kind: kEnum, enum: e, repeated: true} }
func (fl *field) on(b backend) *field { fl.only = b; return fl }

func newMessage(name string, fields map[string]*field) *message {
	return &message{name: name, fields: fields}
}

// Request schemas. Free-form Struct fields (args, response, schemas, and tool
// configs the emulator does not model) are accepted as any JSON object.
var (
	enumHarmCategory = enum("HarmCategory", "HARM_CATEGORY_UNSPECIFIED", "HARM_CATEGORY_HARASSMENT",
		"HARM_CATEGORY_HATE_SPEECH", "HARM_CATEGORY_SEXUALLY_EXPLICIT", "HARM_CATEGORY_DANGEROUS_CONTENT",
		"HARM_CATEGORY_CIVIC_INTEGRITY", "HARM_CATEGORY_JAILBREAK", "HARM_CATEGORY_IMAGE_HATE",
		"HARM_CATEGORY_IMAGE_DANGEROUS_CONTENT", "HARM_CATEGORY_IMAGE_HARASSMENT",
		"HARM_CATEGORY_IMAGE_SEXUALLY_EXPLICIT", "HARM_CATEGORY_DEROGATORY", "HARM_CATEGORY_TOXICITY",
		"HARM_CATEGORY_VIOLENCE", "HARM_CATEGORY_SEXUAL", "HARM_CATEGORY_MEDICAL", "HARM_CATEGORY_DANGEROUS")
	enumThreshold = enum("SafetySetting.HarmBlockThreshold", "HARM_BLOCK_THRESHOLD_UNSPECIFIED",
		"BLOCK_LOW_AND_ABOVE", "BLOCK_MEDIUM_AND_ABOVE", "BLOCK_ONLY_HIGH", "BLOCK_NONE", "OFF")
	enumBlockMethod = enum("SafetySetting.HarmBlockMethod", "HARM_BLOCK_METHOD_UNSPECIFIED", "SEVERITY", "PROBABILITY")
	enumFCMode      = enum("FunctionCallingConfig.Mode", "MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED")
	enumThinking    = enum("ThinkingConfig.ThinkingLevel", "THINKING_LEVEL_UNSPECIFIED", "MINIMAL", "LOW", "MEDIUM", "HIGH")
	enumMediaRes    = enum("GenerationConfig.MediaResolution", "MEDIA_RESOLUTION_UNSPECIFIED",
		"MEDIA_RESOLUTION_LOW", "MEDIA_RESOLUTION_MEDIUM", "MEDIA_RESOLUTION_HIGH")
	enumPartMediaRes = enum("Part.MediaResolution.Level", "MEDIA_RESOLUTION_UNSPECIFIED",
		"MEDIA_RESOLUTION_LOW", "MEDIA_RESOLUTION_MEDIUM", "MEDIA_RESOLUTION_HIGH", "MEDIA_RESOLUTION_ULTRA_HIGH")
	enumModality   = enum("GenerationConfig.Modality", "MODALITY_UNSPECIFIED", "TEXT", "IMAGE", "AUDIO", "VIDEO")
	enumLanguage   = enum("ExecutableCode.Language", "LANGUAGE_UNSPECIFIED", "PYTHON")
	enumOutcome    = enum("CodeExecutionResult.Outcome", "OUTCOME_UNSPECIFIED", "OUTCOME_OK", "OUTCOME_FAILED", "OUTCOME_DEADLINE_EXCEEDED")
	enumBehavior   = enum("FunctionDeclaration.Behavior", "UNSPECIFIED", "BLOCKING", "NON_BLOCKING")
	enumScheduling = enum("FunctionResponse.Scheduling", "SCHEDULING_UNSPECIFIED", "SILENT", "WHEN_IDLE", "INTERRUPT")
	enumTaskType   = enum("TaskType", "TASK_TYPE_UNSPECIFIED", "RETRIEVAL_QUERY", "RETRIEVAL_DOCUMENT",
		"SEMANTIC_SIMILARITY", "CLASSIFICATION", "CLUSTERING", "QUESTION_ANSWERING", "FACT_VERIFICATION",
		"CODE_RETRIEVAL_QUERY")

	msgBlob     = newMessage("Blob", map[string]*field{"mimeType": f(kString), "data": f(kBytes), "displayName": f(kString)})
	msgFileData = newMessage("FileData", map[string]*field{"mimeType": f(kString), "fileUri": f(kString), "displayName": f(kString)})
	msgFuncCall = newMessage("FunctionCall", map[string]*field{
		"id": f(kString), "name": f(kString), "args": f(kStruct),
		"partialArgs": rep(kValue).on(vertexOnly), "willContinue": f(kBool).on(vertexOnly),
	})
	msgFuncRespPart = newMessage("FunctionResponsePart", map[string]*field{
		"inlineData": msgF(msgBlob), "fileData": msgF(msgFileData),
	})
	msgFuncResp = newMessage("FunctionResponse", map[string]*field{
		"id": f(kString), "name": f(kString), "response": f(kStruct), "parts": repMsg(msgFuncRespPart),
		"willContinue": f(kBool), "scheduling": enumF(enumScheduling),
	})
	msgExecCode   = newMessage("ExecutableCode", map[string]*field{"language": enumF(enumLanguage), "code": f(kString), "id": f(kString)})
	msgExecResult = newMessage("CodeExecutionResult", map[string]*field{"outcome": enumF(enumOutcome), "output": f(kString), "id": f(kString)})
	msgVideoMeta  = newMessage("VideoMetadata", map[string]*field{"startOffset": f(kDuration), "endOffset": f(kDuration), "fps": f(kNumber)})
	msgPartMedia  = newMessage("Part.MediaResolution", map[string]*field{"level": enumF(enumPartMediaRes), "numTokens": f(kInt)})
	msgToolCall   = newMessage("ToolCall", map[string]*field{"id": f(kString), "toolType": f(kValue), "args": f(kStruct)})
	msgToolResp   = newMessage("ToolResponse", map[string]*field{"id": f(kString), "toolType": f(kValue), "response": f(kStruct)})
	msgPart       = &message{name: "Part", fields: map[string]*field{
		"text": f(kString), "inlineData": msgF(msgBlob), "fileData": msgF(msgFileData),
		"functionCall": msgF(msgFuncCall), "functionResponse": msgF(msgFuncResp),
		"executableCode": msgF(msgExecCode), "codeExecutionResult": msgF(msgExecResult),
		"thought": f(kBool), "thoughtSignature": f(kBytes), "videoMetadata": msgF(msgVideoMeta),
		"mediaResolution": msgF(msgPartMedia),
		"toolCall":        msgF(msgToolCall).on(geminiOnly), "toolResponse": msgF(msgToolResp).on(geminiOnly),
		"partMetadata": f(kStruct).on(geminiOnly),
	}, oneofs: map[string][]string{
		"data": {"text", "inlineData", "fileData", "functionCall", "functionResponse", "executableCode",
			"codeExecutionResult", "toolCall", "toolResponse"},
	}}
	msgContent = newMessage("Content", map[string]*field{"role": f(kString), "parts": repMsg(msgPart)})

	msgFuncDecl = newMessage("FunctionDeclaration", map[string]*field{
		"name": f(kString), "description": f(kString), "parameters": f(kStruct),
		"parametersJsonSchema": f(kValue), "response": f(kStruct), "responseJsonSchema": f(kValue),
		"behavior": enumF(enumBehavior),
	})
	msgEmpty = newMessage("Tool.CodeExecution", map[string]*field{})
	msgTool  = newMessage("Tool", map[string]*field{
		"functionDeclarations": repMsg(msgFuncDecl), "googleSearch": f(kStruct),
		"googleSearchRetrieval": f(kStruct), "codeExecution": msgF(msgEmpty), "urlContext": f(kStruct),
		"googleMaps": f(kStruct), "fileSearch": f(kStruct).on(geminiOnly), "computerUse": f(kStruct),
		"mcpServers": rep(kValue), "retrieval": f(kStruct).on(vertexOnly),
		"enterpriseWebSearch": f(kStruct).on(vertexOnly), "exaAiSearch": f(kStruct).on(vertexOnly),
		"parallelAiSearch": f(kStruct).on(vertexOnly),
	})
	msgFCConfig = newMessage("FunctionCallingConfig", map[string]*field{
		"mode": enumF(enumFCMode), "allowedFunctionNames": rep(kString),
		"streamFunctionCallArguments": f(kBool).on(vertexOnly),
	})
	msgToolConfig = newMessage("ToolConfig", map[string]*field{
		"functionCallingConfig": msgF(msgFCConfig), "retrievalConfig": f(kStruct),
		"includeServerSideToolInvocations": f(kBool),
	})
	msgSafety = newMessage("SafetySetting", map[string]*field{
		"category": enumF(enumHarmCategory), "threshold": enumF(enumThreshold), "method": enumF(enumBlockMethod).on(vertexOnly),
	})
	msgThinking = newMessage("ThinkingConfig", map[string]*field{
		"includeThoughts": f(kBool), "thinkingBudget": f(kInt), "thinkingLevel": enumF(enumThinking),
	})
	msgGenConfig = newMessage("GenerationConfig", map[string]*field{
		"stopSequences": rep(kString), "responseMimeType": f(kString), "responseSchema": f(kStruct),
		"responseJsonSchema": f(kValue), "candidateCount": f(kInt), "maxOutputTokens": f(kInt),
		"temperature": f(kNumber), "topP": f(kNumber), "topK": f(kNumber), "seed": f(kInt),
		"presencePenalty": f(kNumber), "frequencyPenalty": f(kNumber), "responseLogprobs": f(kBool),
		"logprobs": f(kInt), "enableEnhancedCivicAnswers": f(kBool).on(geminiOnly),
		"responseModalities": repEnum(enumModality), "speechConfig": f(kStruct),
		"thinkingConfig": msgF(msgThinking), "imageConfig": f(kStruct), "mediaResolution": enumF(enumMediaRes),
		"audioTranscriptionConfig": f(kStruct), "enableAffectiveDialog": f(kBool),
		"routingConfig": f(kStruct).on(vertexOnly), "modelConfig": f(kStruct).on(vertexOnly),
		"audioTimestamp": f(kBool).on(vertexOnly),
	})
	msgGenerate = newMessage("GenerateContentRequest", map[string]*field{
		"model": f(kString), "contents": repMsg(msgContent), "systemInstruction": msgF(msgContent),
		"tools": repMsg(msgTool), "toolConfig": msgF(msgToolConfig), "safetySettings": repMsg(msgSafety),
		"generationConfig": msgF(msgGenConfig), "cachedContent": f(kString), "labels": f(kStringMap),
		"serviceTier": f(kValue), "continuationToken": f(kBytes), "store": f(kBool).on(geminiOnly),
		"modelArmorConfig": f(kStruct).on(vertexOnly), "outputConfig": f(kStruct).on(vertexOnly),
	})
	msgCountTokens = newMessage("CountTokensRequest", map[string]*field{
		"model": f(kString), "contents": repMsg(msgContent), "generateContentRequest": msgF(msgGenerate).on(geminiOnly),
		"systemInstruction": msgF(msgContent).on(vertexOnly), "tools": repMsg(msgTool).on(vertexOnly),
		"generationConfig": msgF(msgGenConfig).on(vertexOnly),
	})
	msgEmbed = newMessage("EmbedContentRequest", map[string]*field{
		"model": f(kString), "content": msgF(msgContent), "taskType": enumF(enumTaskType),
		"title": f(kString), "outputDimensionality": f(kInt),
	})
	msgBatchEmbed = newMessage("BatchEmbedContentsRequest", map[string]*field{"requests": repMsg(msgEmbed)})
	msgCached     = &message{name: "CachedContent", fields: map[string]*field{
		"name": f(kString), "displayName": f(kString), "model": f(kString), "contents": repMsg(msgContent),
		"systemInstruction": msgF(msgContent), "tools": repMsg(msgTool), "toolConfig": msgF(msgToolConfig),
		"ttl": f(kDuration), "expireTime": f(kTimestamp), "createTime": f(kTimestamp), "updateTime": f(kTimestamp),
		"usageMetadata": f(kStruct),
	}, oneofs: map[string][]string{"expiration": {"ttl", "expireTime"}}}
	msgFile = newMessage("File", map[string]*field{
		"name": f(kString), "displayName": f(kString), "mimeType": f(kString), "sizeBytes": f(kInt),
		"createTime": f(kTimestamp), "updateTime": f(kTimestamp), "expirationTime": f(kTimestamp),
		"sha256Hash": f(kBytes), "uri": f(kString), "downloadUri": f(kString), "state": f(kValue),
		"source": f(kValue), "videoMetadata": f(kStruct), "error": f(kStruct),
	})
	msgCreateFile = newMessage("CreateFileRequest", map[string]*field{"file": msgF(msgFile)})
)

// toCamel converts a proto field name (snake_case) to its JSON name.
func toCamel(s string) string {
	if !strings.Contains(s, "_") {
		return s
	}
	var b strings.Builder
	up := false
	for _, c := range s {
		if c == '_' {
			up = true
			continue
		}
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		b.WriteRune(c)
	}
	return b.String()
}

// toSnake converts a JSON name to the proto field name used in error paths.
func toSnake(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c >= 'A' && c <= 'Z' {
			b.WriteByte('_')
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}

// validator walks a decoded JSON document against a schema, reporting the
// first problem the way the API does and returning the document with every
// key in lowerCamelCase.
type validator struct {
	vertex bool
	strict bool
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func invalidValue(path, typ string, v any) *apiError {
	b, _ := json.Marshal(v)
	return errBadRequest(path, fmt.Sprintf("Invalid value at '%s' (%s), %s", path, typ, b))
}

func (va validator) message(v any, m *message, path string) (map[string]any, *apiError) {
	obj, ok := v.(map[string]any)
	if !ok {
		if path == "" {
			return nil, errBadRequest("", "Invalid JSON payload received. Expected an object.")
		}
		return nil, invalidValue(path, protoPkg+m.name, v)
	}
	out := make(map[string]any, len(obj))
	for _, k := range sortedKeys(obj) {
		val := obj[k]
		name := toCamel(k)
		fl := m.fields[name]
		if fl != nil && ((fl.only == vertexOnly && !va.vertex) || (fl.only == geminiOnly && va.vertex)) {
			fl = nil
		}
		if fl == nil {
			if !va.strict {
				out[k] = val
				continue
			}
			if path == "" {
				return nil, errBadRequest("", fmt.Sprintf("Invalid JSON payload received. Unknown name %q: Cannot find field.", k))
			}
			return nil, errBadRequest(path, fmt.Sprintf("Invalid JSON payload received. Unknown name %q at '%s': Cannot find field.", k, path))
		}
		if _, dup := out[name]; dup {
			return nil, errBadRequest(path, fmt.Sprintf("Invalid JSON payload received. Duplicate field %q (the field is set with both its JSON and its proto name).", k))
		}
		if val == nil {
			continue // null means unset in proto3 JSON
		}
		fp := joinPath(path, toSnake(name))
		nv, err := va.value(val, fl, fp)
		if err != nil {
			return nil, err
		}
		out[name] = nv
	}
	for oneof, members := range m.oneofs {
		set := ""
		for _, mm := range members {
			if _, ok := out[mm]; ok {
				if set != "" {
					return nil, errBadRequest(path, fmt.Sprintf("Invalid JSON payload received. Oneof field '%s' is already set. Cannot set '%s'", oneof, mm))
				}
				set = mm
			}
		}
	}
	return out, nil
}

func (va validator) value(v any, fl *field, path string) (any, *apiError) {
	if fl.repeated {
		arr, ok := v.([]any)
		if !ok {
			return nil, invalidValue(path, typeName(fl), v)
		}
		out := make([]any, 0, len(arr))
		one := *fl
		one.repeated = false
		for i, e := range arr {
			if e == nil {
				return nil, invalidValue(fmt.Sprintf("%s[%d]", path, i), typeName(fl), e)
			}
			ne, err := va.value(e, &one, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, ne)
		}
		return out, nil
	}
	if _, isArr := v.([]any); isArr && fl.kind != kValue {
		return nil, errBadRequest(path, fmt.Sprintf("Invalid JSON payload received. Proto field is not repeating, cannot start list at '%s'.", path))
	}
	switch fl.kind {
	case kMessage:
		return va.message(v, fl.msg, path)
	case kString:
		if _, ok := v.(string); !ok {
			return nil, invalidValue(path, "TYPE_STRING", v)
		}
	case kBool:
		if _, ok := v.(bool); !ok {
			return nil, invalidValue(path, "TYPE_BOOL", v)
		}
	case kInt:
		if !isInt(v) {
			return nil, invalidValue(path, "TYPE_INT32", v)
		}
	case kNumber:
		if !isNumber(v) {
			return nil, invalidValue(path, "TYPE_FLOAT", v)
		}
	case kBytes:
		s, ok := v.(string)
		if !ok {
			return nil, invalidValue(path, "TYPE_BYTES", v)
		}
		if _, err := decodeBase64(s); err != nil {
			return nil, errBadRequest(path, fmt.Sprintf("Invalid value at '%s' (TYPE_BYTES), Base64 decoding failed for %q", path, truncate(s, 64)))
		}
	case kEnum:
		switch x := v.(type) {
		case string:
			if !fl.enum.values[x] {
				return nil, invalidValue(path, protoPkg+fl.enum.name, v)
			}
		case json.Number:
			if !isInt(x) {
				return nil, invalidValue(path, protoPkg+fl.enum.name, v)
			}
		default:
			return nil, invalidValue(path, protoPkg+fl.enum.name, v)
		}
	case kStruct:
		if _, ok := v.(map[string]any); !ok {
			return nil, invalidValue(path, "type.googleapis.com/google.protobuf.Struct", v)
		}
	case kStringMap:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, invalidValue(path, "TYPE_MESSAGE", v)
		}
		for k, e := range m {
			if _, ok := e.(string); !ok {
				return nil, invalidValue(path+"["+strconv.Quote(k)+"]", "TYPE_STRING", e)
			}
		}
	case kDuration:
		s, ok := v.(string)
		if !ok || !durationRE.MatchString(s) {
			return nil, errBadRequest(path, fmt.Sprintf("Invalid value at '%s' (type.googleapis.com/google.protobuf.Duration), Field '%s', Illegal duration format; duration must end with 's'", path, path))
		}
	case kTimestamp:
		s, ok := v.(string)
		if _, err := time.Parse(time.RFC3339Nano, s); !ok || err != nil {
			return nil, errBadRequest(path, fmt.Sprintf("Invalid value at '%s' (type.googleapis.com/google.protobuf.Timestamp), Field '%s', Invalid time format: Failed to parse input", path, path))
		}
	}
	return v, nil
}

var durationRE = regexp.MustCompile(`^-?[0-9]+(\.[0-9]{1,9})?s$`)

func typeName(fl *field) string {
	switch fl.kind {
	case kMessage:
		return protoPkg + fl.msg.name
	case kEnum:
		return protoPkg + fl.enum.name
	case kString:
		return "TYPE_STRING"
	case kInt:
		return "TYPE_INT32"
	case kNumber:
		return "TYPE_FLOAT"
	case kBool:
		return "TYPE_BOOL"
	case kBytes:
		return "TYPE_BYTES"
	}
	return "TYPE_MESSAGE"
}

func isInt(v any) bool {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = string(x)
	case string:
		s = x
	default:
		return false
	}
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return true
	}
	// proto3 JSON accepts integral floats such as 1.0 or 1e3.
	fv, err := strconv.ParseFloat(s, 64)
	return err == nil && fv == math.Trunc(fv) && math.Abs(fv) < 1<<62
}

func isNumber(v any) bool {
	switch x := v.(type) {
	case json.Number:
		return true
	case string:
		if x == "NaN" || x == "Infinity" || x == "-Infinity" {
			return true
		}
		_, err := strconv.ParseFloat(x, 64)
		return err == nil
	}
	return false
}

func toInt(v any) int {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = string(x)
	case string:
		s = x
	default:
		return 0
	}
	fv, _ := strconv.ParseFloat(s, 64)
	return int(fv)
}

// decodeBase64 accepts standard and URL-safe alphabets, padded or not, as
// the proto3 JSON mapping requires.
func decodeBase64(s string) ([]byte, error) {
	t := strings.TrimRight(s, "=")
	if strings.ContainsAny(t, "-_") {
		return base64.RawURLEncoding.DecodeString(t)
	}
	return base64.RawStdEncoding.DecodeString(t)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
