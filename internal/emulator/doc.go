// Package emulator is a strict, deterministic, in-process emulator of the
// Gemini API (Gemini Developer API plus the Vertex AI generate paths). It is
// an http.Handler: tests mount it on httptest.NewServer, and
// `gemini-proxy emulator --listen ADDR` serves it. Its rule is that passing
// against it must mean passing against Google: it never accepts what the
// real API rejects (see /work/shared/gemini-api.md).
//
// # Routes
//
// An optional path prefix before the version segment is ignored. {v} is
// v1beta, v1 or v1alpha.
//
//	POST /{v}/models/{m}:generateContent          unary JSON (pretty-printed, chunked, gzip if accepted)
//	POST /{v}/models/{m}:streamGenerateContent    ?alt=sse: text/event-stream, "data: <one-line JSON>\r\n\r\n"
//	                                              per chunk, no event: lines, no [DONE];
//	                                              without alt: one JSON array "[" obj "\n" (",\r\n" obj "\n")… "]",
//	                                              gzip (flushed per chunk) if accepted
//	POST /{v}/models/{m}:countTokens              contents XOR generateContentRequest
//	POST /{v}/models/{m}:embedContent             deterministic unit vectors (see Embedding)
//	POST /{v}/models/{m}:batchEmbedContents
//	GET  /{v}/models, /{v}/models/{m}             list (pageSize/pageToken) and get; unknown → 404
//	     /{v}/tunedModels/...                     always 404
//	POST/GET /{v}/cachedContents                  create (ttl | expireTime, default 1h) and list
//	GET/PATCH/DELETE /{v}/cachedContents/{id}     PATCH accepts ttl or expireTime only
//	POST /upload/{v}/files                        resumable start → X-Goog-Upload-Url on this host;
//	                                              chunks with upload / "upload, finalize" and
//	                                              X-Goog-Upload-Offset checking → {"file":{…}}
//	GET  /{v}/files, GET/DELETE /{v}/files/{id}
//	POST /{v}/interactions                        snake_case; stream:true → SSE "event:"/"data:" lines
//	                                              ending with "event: done" / "data: [DONE]"
//	GET/DELETE /{v}/interactions/{id}, POST /{v}/interactions/{id}/cancel
//	POST /{v1beta1|v1}/projects/{p}/locations/{l}/publishers/google/models/{m}:{method}
//	POST /{v1beta1|v1}/publishers/google/models/{m}:{method}  (Vertex express mode)
//	     /{v1beta1|v1}/projects/{p}/locations/{l}/interactions[...]
//
// Everything else is 404 "Method not found." in the Google error shape.
// Every answer carries the recorded headers: three Vary lines (Origin,
// X-Origin, Referer), Server "scaffolding on HTTPServer2", Server-Timing
// "gfet4t7; dur=<ms>", X-Content-Type-Options, X-Frame-Options,
// X-XSS-Protection. An unknown model's 404 names "ModelService.ListModels"
// on generate routes and "ListModels" on countTokens, as recorded.
//
// # Authentication
//
// x-goog-api-key or ?key= (and Authorization: Bearer on Vertex paths).
// Missing: 403 PERMISSION_DENIED "Method doesn't allow unregistered
// callers…" (Vertex: 401 UNAUTHENTICATED). Not in Options.ValidKeys: 400
// INVALID_ARGUMENT with ErrorInfo reason API_KEY_INVALID. Caches, files,
// interactions and implicit-cache history are private to a key.
//
// # Validation
//
// Bodies are parsed as proto3 JSON against a schema of the request messages:
// camelCase and snake_case names, enum names and integers, standard and
// URL-safe base64 (padded or not) are accepted; unknown fields give 400
// `Invalid JSON payload received. Unknown name "x" at 'path': Cannot find
// field.` (unless Options.Lenient), with a google.rpc.BadRequest detail and
// snake_case paths. Free-form Struct fields (function args and responses,
// schemas, most server-side tool configs) are not inspected. Semantic checks:
// non-empty contents, roles user/model (or omitted), no empty parts, exactly
// one data field per part (an empty text without a thoughtSignature counts
// as none, unless another part of the content has data: the API accepted
// a model turn [{"text":""}, {functionCall, thoughtSignature}]), cachedContent together with systemInstruction/tools/toolConfig,
// cache model mismatch (400), a cache that expired (404 NOT_FOUND, for the
// key that made it), a cache that is unknown, deleted or another key's (403
// PERMISSION_DENIED "CachedContent not found (or permission denied)"), a
// cache below the model's minimum size (Options.CacheMinTokens,
// CacheMinTokensByModel; 400), Gemini 3 ("gemini-3*") current-turn functionCall
// without thoughtSignature, thinkingLevel MINIMAL on a Gemini 3 Pro model,
// presencePenalty/frequencyPenalty on gemini-2.5-pro (both recorded),
// unknown model, unknown fileData file, body over 100 MB (413).
//
// # Tokens
//
// CountTokens documents the tokenizer (≈4.2–4.4 characters per token on
// English prose, ≈3.2–3.4 on source code). Contents cost one extra role
// token each; images, audio, video and PDFs cost ImageTokens (258) per part,
// text/* and JSON media are tokenized. promptTokenCount = system instruction
// + tools/toolConfig JSON + contents (+ cachedContent). totalTokenCount =
// prompt + candidates + thoughts + toolUsePrompt. Thinking models (2.5 and
// later, unless thinkingBudget is 0) report the tokens of a fixed thought
// summary as thoughtsTokenCount on every answer. maxOutputTokens caps
// candidates + thoughts: the reply is cut at a word boundary and the final
// chunk has finishReason MAX_TOKENS (with no parts when thinking used the
// whole budget: content {"role":"model"}). Streams repeat cumulative usage
// on every chunk, except where the API does not: a code-execution result
// chunk carries prompt and total only, as do all but the last chunk of
// Gemini 1.x/2.0 (Vertex: usage only on the last chunk, without candidate
// index). Answers from 2.5 on carry serviceTier "standard"; 1.x/2.0
// answers carry candidatesTokensDetails and, unary, avgLogprobs; tool use
// adds toolUsePromptTokenCount and toolUsePromptTokensDetails.
//
// # Answers
//
// The answer follows the request's features and the model family, as
// recorded in shared/gemini-recordings (TestRecordings replays them):
//   - modelVersion is the concrete model: gemini-flash-latest answers as
//     gemini-3.6-flash (recorded), gemini-flash-lite-latest as
//     gemini-3.5-flash-lite and gemini-pro-latest as gemini-3.1-pro-preview
//     (assumed). responseId is 23 characters of mixed-case base64url.
//   - Function calls: toolConfig.functionCallingConfig mode ANY calls the
//     first (allowed) declared function, with arguments generated from its
//     schema (every property, a value of its type or its first enum
//     value). In mode AUTO the model's choice does not follow from the
//     request, so the answer is text unless Options.Script names calls.
//     Gemini 3 calls carry an id; thinking models sign the first call;
//     2.5 adds finishMessage "Model generated function call(s).".
//   - codeExecution: an executableCode part, a codeExecutionResult part
//     (its own stream chunk, without candidate index), then the text;
//     fileSearch: an executableCode part and grounding on the stores;
//     googleSearch and urlContext: groundingMetadata (queries, search
//     entry point, chunks, one support per sentence) and
//     urlContextMetadata for the URLs of the last user text. The content
//     is invented; only the shape is the API's.
//   - Thought signatures: Gemini 3 on the first function call, every
//     executableCode part and the last part (in streams a trailing empty
//     text part that carries finishReason); 2.5 on the first function call,
//     or on the first text part when includeThoughts asked for a thought
//     summary (sent as a thought:true part first); 1.x/2.0 never.
//   - Options.Script can also block the prompt (promptFeedback.blockReason,
//     no candidates) or stop for safety (finishReason SAFETY, empty
//     content, safetyRatings). A request header X-Emulator-Script scripts
//     one request instead, e.g. "call=read_file" or
//     "block=PROHIBITED_CONTENT" (see ParseScript).
//
// # Implicit caching
//
// Per API key the server remembers the last 32 requests of the last 5
// minutes (by Options.Now). Like the API's, the match is on the prompt's
// prefix (gemini-api.md §6.1): the model, systemInstruction, tools and
// toolConfig must be identical; then the prompt is read as a sequence of
// units, each content's role marker followed by its parts, and whole
// units are shared while they are identical (after camelCase
// normalisation). Inside the first text part that differs, the tokenizer
// runs both texts share are shared too, except the run the first
// difference falls in (a word cut by the difference is a different
// token). A part boundary is a unit boundary (how the API tokenises one
// is not documented): "AB" as one part and "A", "B" as two share the runs
// of "A" but its last.
// When the longest prefix shared with any remembered request costs at
// least the model's minimum (Options.ImplicitCacheMinTokens for every
// model, else ImplicitCacheMinTokensByModel, else
// DefaultImplicitCacheMinTokens: 512 on 2.5 Flash as recorded, 2,048 on
// 2.5 Pro and 4,096 on 3.x as documented, off before 2.5), its token count
// is reported as cachedContentTokenCount with cacheTokensDetails.
// Requests using an explicit cachedContent report that cache instead.
// Interactions report the history of previous_interaction_id as
// total_cached_tokens under the same minimum.
//
// # Interactions
//
// An interaction is written in the recorded key order (id, status, usage,
// created, updated, service_tier, steps, object, model). A thinking model
// reports total_thought_tokens (in total_tokens) and, unless
// generation_config.thinking_summaries is "none" (an assumption), a
// thought step with a signature before the model_output step. A stream
// sends interaction.created, interaction.status_update, step.start /
// step.delta / step.stop per step (the thought step's delta is its
// thought_signature) and interaction.completed without steps.
//
// A stored interaction (store defaults to true) can be read and continued
// by its key for Options.InteractionRetention after it was created
// (default 55 days, §7.4), then it is gone. The history of a continuation
// is rebuilt from the previous_interaction_id chain, so a
// previous_interaction_id that is unknown, another key's, created with
// store=false, deleted, expired, or whose chain lost a member (deleted or
// expired) is refused with 404 not_found, or 400 invalid_request with
// Options.UnknownPreviousStatus 400. Server.DeleteInteractions forgets
// every stored interaction at once (fault injection).
//
// # Faults
//
// Server.SetFault installs a Fault (status with a Gemini-shaped error body
// and optional Retry-After/RetryInfo, header delay, chunk delay, disconnect
// after N stream chunks, limited to Times requests or to a Match func). A
// request header X-Emulator-Fault applies one to a single request, e.g.
// "status=429, retry-after=3" or "header-delay=200ms; chunk-delay=50ms;
// disconnect-after=2".
package emulator
