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
// The table below is the reference the README reuses.
//
//	name                                           type       labels                       meaning
//	gemini_proxy_requests_total                    counter    route, model, code, stream   requests served, by final HTTP status (499 = client went away)
//	gemini_proxy_request_duration_seconds          histogram  route, stream                time from request arrival until the response body is complete
//	gemini_proxy_upstream_duration_seconds         histogram  route                        time from sending the upstream request until its response headers arrive
//	gemini_proxy_time_to_first_byte_seconds        histogram  route                        streaming routes: time from request arrival until the first body byte reached the client
//	gemini_proxy_proxy_overhead_seconds            histogram  route                        time spent in the proxy before the upstream request starts (read, rewrite, encode)
//	gemini_proxy_in_flight_requests                gauge      -                            requests currently being served
//	gemini_proxy_request_bytes_total               counter    route, stage                 request body bytes; stage=received (from the client) or sent (to the upstream, incl. fallback retries)
//	gemini_proxy_response_bytes_total              counter    route                        response body bytes written to clients
//	gemini_proxy_usage_tokens_total                counter    model, kind                  tokens from the last usageMetadata of each response; kind=prompt|cached|candidates|thoughts|tool_use
//	gemini_proxy_client_requests_total             counter    sdk, deprecated              requests by client SDK family (from x-goog-api-client)
//	gemini_proxy_rewrite_requests_total            counter    mode, outcome                generate requests by rewrite mode (on|dry-run|off|disabled) and outcome (changed|unchanged|error|skipped)
//	gemini_proxy_rewrite_bytes_total               counter    stage                        body bytes of requests the rewriter changed, stage=before|after
//	gemini_proxy_rewrite_saved_bytes_total         counter    rule                         bytes removed by each rewrite rule (replaced content minus references)
//	gemini_proxy_rewrite_replacements_total        counter    rule                         spans replaced (or turns created, for unflatten) by each rule
//	gemini_proxy_rewrite_errors_total              counter    -                            rewrites that failed or panicked; the original body was forwarded
//	gemini_proxy_rewrite_fallbacks_total           counter    -                            rewritten requests retried with the original body after a 400 or 5xx
//	gemini_proxy_upstream_errors_total             counter    kind                         upstream failures: timeout|unreachable|tls|aborted|other
//	gemini_proxy_client_cancels_total              counter    -                            requests whose client went away before the response completed
//	gemini_proxy_build_info                        gauge      version, goversion           always 1; identifies the running build
package metrics
