// Package metrics owns every Prometheus metric that gemini-proxy exports.
//
// All names carry the gemini_proxy_ prefix and every label takes its values
// from a closed set (route names, normalised model names on an allowlist or
// "_other", rule names, and the constants in this package). No metric is
// ever labelled with a credential, tenant, request id, path or error string.
//
// Build the collectors once with New on a private registry:
//
//	reg := prometheus.NewRegistry()
//	m := metrics.New(reg)
//
// # Metrics
//
// The table below is the reference the README reuses; a test checks it
// against the registry (names, types and labels).
//
//	name                                                  type       labels                       meaning
//	gemini_proxy_requests_total                           counter    route, model, code, stream   requests served, by final HTTP status (499 = client went away)
//	gemini_proxy_request_duration_seconds                 histogram  route, stream                time from request arrival until the response body is complete
//	gemini_proxy_upstream_duration_seconds                histogram  route                        time from sending the upstream request until its response headers arrive (both attempts of a fallback)
//	gemini_proxy_time_to_first_byte_seconds               histogram  route                        streaming routes: time from request arrival until the first body byte reached the client
//	gemini_proxy_proxy_overhead_seconds                   histogram  route                        time spent in the proxy before the upstream request starts (routing, decode, rewrite, encode); the client's upload time is left out
//	gemini_proxy_in_flight_requests                       gauge      -                            requests currently being served
//	gemini_proxy_request_bytes_total                      counter    route, stage                 request body bytes; stage=received (from the client) or sent (to the upstream, incl. fallback retries)
//	gemini_proxy_response_bytes_total                     counter    route                        response body bytes written to clients
//	gemini_proxy_usage_tokens_total                       counter    model, kind                  tokens from the last usageMetadata of each response; kind=prompt|cached|candidates|thoughts|tool_use (prompt includes cached)
//	gemini_proxy_client_requests_total                    counter    sdk, deprecated              requests by client SDK family (from x-goog-api-client)
//	gemini_proxy_rewrite_requests_total                   counter    mode, outcome                generate requests by rewrite mode (on|dry-run|off|disabled) and outcome (changed|unchanged|error|skipped|invalid_request)
//	gemini_proxy_rewrite_bytes_total                      counter    stage                        body bytes of generate requests rewritten in mode on, stage=before|after, when the upstream accepted them without fallback
//	gemini_proxy_rewrite_saved_bytes_total                counter    rule                         bytes removed by each rewrite rule (replaced content minus references); only bodies the upstream accepted, never after a fallback
//	gemini_proxy_rewrite_replacements_total               counter    rule                         spans replaced (or turns created, for unflatten; parts split, for stable) by each rule, same condition
//	gemini_proxy_rewrite_source_saved_bytes_total         counter    source                       bytes removed by where the spans were: text|json_text|tool_result|inline_data (JSON text values, functionResponse values); same condition
//	gemini_proxy_rewrite_source_replacements_total        counter    source                       spans replaced by where they were, same condition
//	gemini_proxy_rewrite_errors_total                     counter    -                            rewrites that failed or panicked; the original body was forwarded
//	gemini_proxy_rewrite_audit_failures_total             counter    reason                       rewritten bodies that failed the audit against the original (reason: rewrite.AuditReasons); the original body was forwarded
//	gemini_proxy_rewrite_fallbacks_total                  counter    -                            rewritten requests retried with the original body after a 400 INVALID_ARGUMENT or 500
//	gemini_proxy_rewrite_rejections_total                 counter    case                         error answers to rewritten requests; case=invalid_argument|internal (retried) or bad_request|rate_limited|unavailable|timeout|other (not retried)
//	gemini_proxy_tokens_saved_total                       counter    rule, model                  estimated prompt tokens not sent: text bytes removed × tokens_per_byte (image: 258 per image minus its reference); same condition as saved bytes
//	gemini_proxy_tokens_per_byte                          gauge      model                        tokens per byte of text in use for the estimate: from exact countTokens samples if any, else from usageMetadata, else the prior 1/3.5
//	gemini_proxy_tokens_per_byte_samples_total            counter    model, source                calibration samples taken, source=usage|count_tokens
//	gemini_proxy_saved_dollars_total                      counter    model                        net USD saved, per request the proxy changed whose saving is positive: counterfactual (the client's own request billed with implicit caching, estimated) − billed (usageMetadata); see "The dollar ledger"
//	gemini_proxy_cost_increase_dollars_total              counter    model                        USD by which requests the proxy changed cost more than their counterfactual; net saving = saved − cost_increase
//	gemini_proxy_prefix_changes_total                     counter    reason                       requests not starting with what the proxy sent for the conversation's previous request: reason=rewrite (the client's own request did) or client
//	gemini_proxy_prefix_change_tokens_total               counter    -                            estimated tokens of the previously sent prefix that a rewrite prefix change kept from the cached rate
//	gemini_proxy_compaction_decisions_total               counter    reason                       answered requests whose compaction changed turns already sent (rewrite.cache_aware_compaction): reason=pays (compacted), keeps_prefix (sent prefix kept) or after_prefix
//	gemini_proxy_ledger_requests_total                    counter    group, turn                  priced generate requests accounted by the ledger, group=treated|holdout, turn=1…8|9-16|17+ (position in the conversation)
//	gemini_proxy_ledger_billed_dollars_total              counter    group, turn                  USD billed for them, from usageMetadata
//	gemini_proxy_ledger_billed_dollars_squared_total      counter    group, turn                  sum of each request's billed USD squared (variance of the measured saving)
//	gemini_proxy_ledger_counterfactual_dollars_total      counter    group, turn                  estimated USD of the clients' own requests with implicit caching (= billed where they were sent as is)
//	gemini_proxy_spent_dollars_total                      counter    model                        estimated USD spent: (prompt − cached + tool_use) × input + cached × cached_input + (candidates + thoughts) × output
//	gemini_proxy_unpriced_requests_total                  counter    model                        generate responses whose model has no price in the table (no dollars estimated)
//	gemini_proxy_price_dollars_per_million_tokens         gauge      model, kind                  the configured price table, kind=input|cached_input|output (allowlisted models)
//	gemini_proxy_price_checked_timestamp_seconds          gauge      model                        when each price was last checked (Unix time of its date)
//	gemini_proxy_count_tokens_requests_total              counter    outcome                      sampled countTokens calls on original requests: ok|error|rate_limited|busy
//	gemini_proxy_sampled_prompt_tokens_total              counter    model, kind                  sampled requests: kind=original_exact (countTokens), original_estimated (sent + estimate), sent (promptTokenCount)
//	gemini_proxy_upstream_errors_total                    counter    kind                         upstream failures: timeout|unreachable|tls|aborted|other
//	gemini_proxy_upstream_responses_total                 counter    route, code                  upstream responses by HTTP status, including the rejected first attempt of a fallback
//	gemini_proxy_client_cancels_total                     counter    -                            requests whose client went away before the response completed
//	gemini_proxy_stall_grace_total                        counter    -                            client read deadlines that expired during a process stall and were extended once (cmd/gemini-proxy stall.go)
//	gemini_proxy_memory_budget_bytes                      gauge      -                            the process-wide budget of tap, rewrite and chunked-body buffers (memory.limit_bytes minus cache and reserve; 0: none)
//	gemini_proxy_memory_budget_used_bytes                 gauge      -                            bytes of that budget held by requests in flight
//	gemini_proxy_memory_budget_refusals_total             counter    consumer                     buffers refused by the spent budget: consumer=tap|rewrite|chunked_body
//	gemini_proxy_access_log_dropped_total                 counter    -                            log lines dropped because the asynchronous log buffer (log.buffer_bytes) was full
//	gemini_proxy_build_info                               gauge      version, goversion           always 1; identifies the running build
//	gemini_proxy_interactions_requests_total              counter    kind                         generate requests eligible for the Interactions API: kind=continued|session|started|full (upstream_state.interactions)
//	gemini_proxy_interactions_saved_bytes_total           counter    -                            request bytes not uploaded thanks to continuation (generateContent body minus the interaction body sent)
//	gemini_proxy_interactions_fallbacks_total             counter    reason                       interaction requests replaced by the generateContent request: not_found|rejected|upstream_error|untranslatable|transport
//	gemini_proxy_context_cache_created_total               counter    model                        explicit context caches (cachedContents) the proxy created (upstream_state.context_cache)
//	gemini_proxy_context_cache_live                        gauge      model                        proxy-made caches not yet expired or deleted
//	gemini_proxy_context_cache_storage_token_seconds_total  counter   model                        storage billed: cache tokens × seconds from creation to deletion, or to expiry when it expired or a delete failed (÷ 3600 = token-hours), counted when a cache ends
//	gemini_proxy_context_cache_cached_tokens_total         counter    model                        cachedContentTokenCount of requests that named a proxy-made cache (billed at the cached rate)
//	gemini_proxy_context_cache_saved_dollars_total         counter    model                        USD saved before costs: cached tokens × (input − cached_input) × (1 − implicit-cache share of the prefix, as estimated for the decision)
//	gemini_proxy_context_cache_cost_dollars_total          counter    model, kind                  USD the caches cost, kind=creation (tokens × input) or storage (token-hours × storage); net saving = saved − cost
//	gemini_proxy_context_cache_fallbacks_total             counter    model                        requests naming a proxy-made cache answered 400, 403, 404 or 5xx, resent once with the client's original body before any byte reached the client
//	gemini_proxy_context_cache_requests_total              counter    model, outcome               answered generate requests with context caching on: outcome=cached|full
//	gemini_proxy_context_cache_operations_total            counter    op, result                   cachedContents calls: op=create|renew|delete, result=ok|error|dropped (no free worker)
//	gemini_proxy_cache_hits_total                         counter    area                         cache lookups that found an entry; area=served|blocks|conversations (cache.go)
//	gemini_proxy_cache_misses_total                       counter    area                         cache lookups that found nothing
//	gemini_proxy_cache_evictions_total                    counter    area                         entries removed for room or TTL
//	gemini_proxy_cache_entries                            gauge      area                         entries held in the local cache
//	gemini_proxy_cache_bytes                              gauge      area                         bytes held in the local cache (value plus per-entry overhead)
//	gemini_proxy_cache_max_bytes                          gauge      area                         the local cache's bound in bytes
//	gemini_proxy_cache_served_responses_total             counter    -                            model responses recorded in the served-response index
//	gemini_proxy_cache_unflatten_checks_total             counter    result                       transcript segments checked against served responses: verified|rejected
//	gemini_proxy_cache_redis_up                           gauge      -                            redis backend only: 1 when Redis answered its last call, 0 while local-only
//	gemini_proxy_cache_redis_errors_total                 counter    op                           redis backend only: failed Redis calls, op=read|write
//	gemini_proxy_cache_redis_writes_total                 counter    -                            redis backend only: served responses written to Redis
//	gemini_proxy_cache_redis_dropped_writes_total         counter    -                            redis backend only: writes dropped (queue full or Redis down)
//	gemini_proxy_cache_redis_hits_total                   counter    -                            redis backend only: lookups answered by Redis after a local miss
//	gemini_proxy_cache_redis_invalid_values_total         counter    -                            redis backend only: values whose HMAC failed, each a miss
//	gemini_proxy_cache_redis_mode                         gauge      mode                         redis backend only: 1 for single, sentinel or cluster
//	gemini_proxy_cache_redis_lock_timeouts_total          counter    -                            redis backend only: context-cache scope locks not taken in time (bookkeeping stayed local)
//	gemini_proxy_cache_redis_leases_won_total             counter    -                            redis backend only: context-cache create leases won
//
// # Estimating tokens saved
//
// Rewriting removes bytes; the upstream charges tokens. For each rewritten
// request the upstream accepted, tokens saved per rule = text bytes removed
// × tokens_per_byte(model). The ratio is an exponentially weighted,
// byte-weighted mean calibrated from the proxy's own traffic: for each
// rewritten text-only request, (promptTokenCount − one role token per
// content) / bytes of text sent. When metrics.count_tokens_sample_rate is
// set, the proxy also asks the upstream's countTokens for the exact token
// count of a sample of original requests and calibrates from (original −
// sent tokens) / bytes removed instead, which measures the removed content
// itself. The estimate's stated tolerance is ±10% of the exact figure on
// code-heavy conversations (the end-to-end test in internal/stack checks
// it against the emulator's tokenizer); it is least accurate when the
// removed text differs in kind from the rest of the prompt (prose removed
// from a prompt dominated by code, or the reverse), which the countTokens
// samples correct. The
// tokens saved are not dollars: a removed token might have been billed at
// the cached price. The dollar ledger below prices them.
//
// # The dollar ledger
//
// For each priced generate request the proxy read, the ledger bills the
// response's usageMetadata: (prompt − cached + tool_use) × input + cached
// × cached_input + (candidates + thoughts) × output. Where the proxy sent
// something other than the client's bytes, it also estimates the
// counterfactual, what the client's own request would have been billed:
// its prompt tokens P_n = prompt + the estimated tokens saved, of which
// K_n are cached, K_n being P_n × the estimated share of the client's
// prompt that it shares with the client's previous request of the
// conversation (same tenant, model, system instruction and tools; parts
// compared whole, text in 512-byte chunks), when that request was at most
// five minutes earlier and K_n reaches the model's implicit-cache minimum
// (internal/implicitcache, shared with the emulator). The saving is counterfactual − billed, to
// saved_dollars_total when positive, to cost_increase_dollars_total when
// negative. It is an estimate: Gemini's implicit cache is best effort, and
// the counterfactual assumes it would have cached the shared prefix. The
// holdout (metrics.holdout_fraction) measures instead: the ledger_*
// series by group compare the billed cost of conversations sent as the
// clients wrote them with that of rewritten ones, turn by turn.
package metrics
