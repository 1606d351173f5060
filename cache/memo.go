package cache

// GetAnalysis returns the rewrite analysis stored under key for the
// Verifier's tenant. Together with SetAnalysis it makes the Verifier a
// rewrite.Memo, so that the rewriter skips segmenting the turns of a
// conversation it has seen before (the per-conversation analysis of
// DESIGN §2). The analysis is local to each replica: it only saves work,
// and the rewrite is the same with or without it.
func (v *Verifier) GetAnalysis(key string) ([]byte, bool) {
	return v.s.Get(AreaConversations, v.tenant, key)
}

// SetAnalysis stores the rewrite analysis value under key for the
// Verifier's tenant. The value is not copied; the rewriter never changes it
// after the call. It may be dropped at any time (the cache is bounded).
func (v *Verifier) SetAnalysis(key string, value []byte) {
	v.s.Set(AreaConversations, v.tenant, key, value)
}
