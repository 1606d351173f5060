// Package upstream translates between generateContent and the Interactions
// API so that the proxy can continue a conversation server-side (issue 8):
// when a request's contents begin with exactly the turns of an earlier
// exchange stored as an interaction, only the new turns are sent to
// POST /{version}/interactions with previous_interaction_id, and the
// interaction is translated back into the GenerateContentResponse (unary) or
// the ?alt=sse stream the client asked for. All functions are pure: they
// read bytes and write bytes, never do I/O of their own, never log and keep
// no global state. Field facts are from /work/shared/gemini-api.md §4, §5
// and §7 and from the Go SDK's generated Interactions models
// (google.golang.org/genai@v1.77.0/interactions/models/interactions).
//
// # Requests: ToInteraction
//
// ToInteraction is conservative: anything without an exact Interactions
// equivalent makes ok=false, and the caller sends the original request.
// Nothing is ever dropped silently. Field names may be camelCase or
// snake_case (§4.5); a field given twice, in either spelling, is refused.
// The output is snake_case (§7) with this shape:
//
//	{"model", "input":[steps], "previous_interaction_id"?, "system_instruction"?,
//	 "generation_config"?, "tools"?, "response_format"?, "safety_settings"?,
//	 "labels"?, "store":true, "stream"}
//
// What translates exactly:
//
//   - contents (only the last newTurns; §7.1 "previous_interaction_id only
//     carries the conversation history"): a user content (role "user" or
//     omitted) becomes {"type":"user_input","content":[…]} with text parts as
//     {"type":"text","text"} and inlineData / fileData as
//     {"type":"image"|"audio"|"video"|"document","data"|"uri","mime_type"}
//     for the MIME types the Interactions content types enumerate (image
//     png/jpeg/webp/heic/heif/gif/bmp/tiff, the audio and video lists,
//     application/pdf and text/csv as document). A user content made only
//     of functionResponse parts becomes one
//     {"type":"function_result","call_id","name","result"} step per part,
//     result being the response object unchanged. A model content becomes
//     model_output steps (runs of text parts) and
//     {"type":"function_call","id","name","arguments"} steps, in order.
//   - systemInstruction with exactly one text part → system_instruction
//     string (its role is ignored, as the API does, §4.1).
//   - generationConfig: temperature, topP, seed, maxOutputTokens (exact
//     digits kept), stopSequences → top_p, max_output_tokens,
//     stop_sequences; candidateCount 1; responseModalities ["TEXT"];
//     thinkingConfig.thinkingLevel MINIMAL|LOW|MEDIUM|HIGH →
//     thinking_level lowercase; thinkingConfig.includeThoughts true →
//     thinking_summaries "auto", and "none" when includeThoughts is false
//     or absent (always written: generateContent returns thought parts
//     only to a client that asked, and the Interactions default may be
//     "auto").
//   - responseMimeType "text/plain"|"application/json" and
//     responseJsonSchema → response_format
//     {"type":"text","mime_type","schema"}.
//   - tools: functionDeclarations with name, description and
//     parametersJsonSchema → {"type":"function","name","description",
//     "parameters"}.
//   - toolConfig.functionCallingConfig.mode AUTO|ANY|NONE|VALIDATED →
//     generation_config.tool_choice "auto"|…; with allowedFunctionNames →
//     {"allowed_tools":{"mode","tools"}}.
//   - safetySettings {category HARM_CATEGORY_{HATE_SPEECH, DANGEROUS_CONTENT,
//     HARASSMENT, SEXUALLY_EXPLICIT, CIVIC_INTEGRITY}, threshold
//     BLOCK_{LOW_AND_ABOVE, MEDIUM_AND_ABOVE, ONLY_HIGH, NONE}|OFF} →
//     safety_settings {type, threshold} lowercase.
//   - labels (string map) unchanged.
//
// What makes ok=false (the full request is sent instead):
//
//   - any unknown field, at any level, and null where an object is needed;
//   - cachedContent, serviceTier, store, continuationToken, model in the
//     body: they are not per-interaction inputs the proxy may restate;
//   - a systemInstruction with several parts or a non-text part (the
//     Interactions field is one string, §7.1, and how parts would be joined
//     is not documented);
//   - thoughtSignature or thought:true on any part, and any part field other
//     than text, inlineData, fileData, functionCall (model) and
//     functionResponse (user): executableCode, codeExecutionResult,
//     videoMetadata, mediaResolution, inlineData.displayName, toolCall, …
//     The Interactions API keeps signatures on separate thought steps
//     (§7.1 "Stateless use", marked unverified there), so placing them is a
//     guess. In a continuation this costs nothing: the model turns, with
//     their signatures, are in the stored prefix, not in the new turns;
//   - functionCall or functionResponse without an id (call_id is what ties
//     a result to the stored call), functionResponse with parts,
//     willContinue or scheduling, a content mixing functionResponse with
//     other parts, empty text in a user content, a content without parts;
//   - inline or file data of a MIME type the Interactions content types do
//     not list (for example text/plain, application/json);
//   - generationConfig topK (no top_k in Interactions' generation_config),
//     responseSchema (OpenAPI-subset dialect, not JSON Schema), any
//     thinkingBudget — 0 included, since it switches thinking off and no
//     thinking_level says exactly that —, candidateCount other than 1,
//     presencePenalty, frequencyPenalty, responseLogprobs, logprobs,
//     mediaResolution, speechConfig, imageConfig, other responseModalities,
//     other responseMimeType values, enableEnhancedCivicAnswers;
//   - enum values given as integers, numbers given as strings;
//   - function declarations with parameters (OpenAPI Schema), response,
//     responseJsonSchema or behavior; every server-side tool (googleSearch,
//     codeExecution, urlContext, googleMaps, fileSearch, …): their results
//     come back as google_search_call/_result, code_execution_* … steps and
//     annotations, and the groundingMetadata, executableCode and
//     codeExecutionResult a generateContent response would carry cannot be
//     rebuilt exactly from them;
//   - toolConfig.retrievalConfig, includeServerSideToolInvocations, mode
//     MODE_UNSPECIFIED;
//   - other harm categories or thresholds, safetySettings[].method.
//
// Not verified against the real API, only against the emulator
// (internal/emulator) and the SDK's models: that a function_result whose
// result is the functionResponse.response object reaches the model as the
// same FunctionResponse (§7 does not document it), and that a model
// without thinking (gemini-2.0-flash) accepts thinking_summaries "none".
//
// # Responses: FromInteraction
//
// FromInteraction maps an Interaction (§7.2) to
//
//	{"candidates":[{"content":{"parts":[…],"role":"model"},"finishReason","index":0}],
//	 "usageMetadata":{…},"modelVersion":model,"responseId":interaction id}
//
// Steps: user_input and function_result (echoed input) are skipped;
// model_output text → {"text"}, image/audio/video/document data →
// {"inlineData":{"data","mimeType"}}; thought → one {"text","thought":true}
// part per summary text, and its signature becomes the thoughtSignature of
// the next part (or of a trailing empty text part, as streamed
// generateContent delivers late signatures, §4.7); function_call →
// {"functionCall":{"id","name","args"}}. Any other step type, a
// model_output with an error, or no output at all is ErrUntranslatable.
//
// Status → finishReason: completed and requires_action (a pending client
// function call) → STOP; incomplete and budget_exceeded → MAX_TOKENS;
// failed, cancelled, in_progress, queued, requires_continuation →
// ErrUntranslatable (no finished response exists; the proxy falls back).
//
// Usage (§5.2, §7.2): promptTokenCount = total_input_tokens (both include
// cached tokens), cachedContentTokenCount = total_cached_tokens,
// candidatesTokenCount = total_output_tokens, thoughtsTokenCount =
// total_thought_tokens, toolUsePromptTokenCount = total_tool_use_tokens,
// totalTokenCount = total_tokens (their sum when absent); the
// *_by_modality lists become prompt/cache/candidates/toolUsePrompt
// TokensDetails with upper-case modality names. Zero counts other than
// prompt and total are omitted, as Google omits them.
//
// # Streams: StreamTranslator
//
// StreamTranslator reads the interaction SSE stream (§7.3: "event:" and
// "data:" lines, LF or CRLF, split anywhere, ending with data: [DONE]) and
// writes Gemini SSE (§1.3.1): "data: <one-line JSON>\r\n\r\n" per chunk, no
// event lines, no [DONE]. Text and thought-summary deltas become one chunk
// each as they arrive; a function call becomes one chunk at its step.stop
// (arguments from step.start or joined arguments_delta pieces); the final
// chunk, written at interaction.completed, has an empty text part (carrying
// a pending thought signature), finishReason and usageMetadata. Unlike
// Google, intermediate chunks carry usageMetadata only when the event
// reports total_usage. An error event is returned as *StreamError, a
// stream cut before interaction.completed makes Close return ErrIncomplete.
//
// # Not in this package
//
// Matching a request's prefix to a stored interaction (the conversation
// cache's hash chain), the HTTP calls, the fallback to the full request on
// 404/400 or ErrUntranslatable before any byte reached the client, and the
// metrics (continued vs full requests, bytes not uploaded, fallbacks) belong
// to the proxy.
package upstream
