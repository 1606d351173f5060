package rewrite

import "slices"

// SessionWhere is the WHERE of the references Elide writes: the full copy
// was sent in an earlier request of the same session, which the upstream
// holds as conversation history.
const SessionWhere = "earlier in this session"

// Elide replaces, in the last content (the new turn) of a
// generateContent request body, when that content is a user turn (its
// role "user" or omitted; never in a trailing model prefill), each block that sent reports as already
// sent earlier in the same session by a reference in the package's format
// (see the package documentation), with WHERE SessionWhere:
//
//	[unchanged: NAME sha256:HASH12, identical to the copy earlier in this session]
//	[same MIME sha256:HASH12 as earlier in this session]
//
// sent receives the hex SHA-256 of each candidate block, computed as for
// Report.Blocks (so a Report.Blocks SHA256 of an earlier request matches).
// Only blocks of at least Options.MinBlockBytes whose reference is at most
// half their size are replaced, as in Request. body should be the output
// of Request with the same options: Elide analyses it the same way, so
// any replacement Request would still make is made too and reported.
//
// It is meant for the proxy's opt-in session mode (issue 8), where the
// upstream continues a stored interaction that already holds the earlier
// copy; without that history a reference would point at nothing. The
// returned Replacements are in request order; those made for the session
// have Target -1 and Rule RuleUnchanged (RuleImage for inline data). When
// nothing is replaced the returned slice is body itself.
//
// Elide audits its output before returning it (auditsession.go): each
// reference names the SHA-256 of the bytes it replaced, that hash is in
// sent, the span is in the new turn, and expanding the references gives
// body back. When the audit fails it returns the *AuditError and no body;
// the caller sends body as it is.
func Elide(body []byte, opts Options, sent func(sha256 string) bool) ([]byte, []Replacement, error) {
	out, rep, err := elide(body, opts, sent)
	if err != nil {
		return nil, nil, err
	}
	if rep.aud == nil {
		return body, nil, nil
	}
	if err := auditSession(body, out, rep, sent); err != nil {
		return nil, nil, err
	}
	return out, rep.Replacements, nil
}

// elide is Elide without the audit: it returns the output and a Report
// holding only the Replacements and the audit's records (nil records when
// nothing was replaced).
func elide(body []byte, opts Options, sent func(sha256 string) bool) ([]byte, *Report, error) {
	st := states.Get().(*state)
	defer st.release()
	req, err := scanWith(body, st, 0, limitsOf(&opts))
	if err != nil {
		return nil, nil, err
	}
	if len(req.contents) == 0 {
		return nil, nil, ErrNoContents
	}
	e := newEngine(body, req, &opts, st)
	if err := e.analyse(); err != nil {
		return nil, nil, err
	}
	last := len(req.contents) - 1
	// Only a user turn is a new turn: a trailing model content is a
	// prefill the model continues word for word, and a reference there
	// would put words in its mouth (the proxy's session mode never sends
	// one; a library caller may).
	userTurn := req.contents[last].role == "" || req.contents[last].role == "user"
	// Spans already replaced in a part, so that nested blocks (a fence
	// inside a document tag) are never replaced twice.
	type partSpan struct{ tp, start, end int }
	var taken []partSpan
	overlaps := func(o *occ) bool {
		return slices.ContainsFunc(taken, func(s partSpan) bool {
			return s.tp == o.tp && o.tp >= 0 && o.b.start < s.end && s.start < o.b.end
		})
	}
	for i := range e.occs {
		if o := &e.occs[i]; o.replace && o.tp >= 0 {
			taken = append(taken, partSpan{o.tp, o.b.start, o.b.end})
		}
	}
	for i := range e.runs {
		o := &e.runs[i]
		taken = append(taken, partSpan{o.tp, o.b.start, o.b.end})
	}
	// The full copy a kept reference names stays in full: cut, the
	// reference would name nothing in the body and the audit fail (a
	// superseded older version names the newer one in the new turn).
	targets := map[int32]bool{}
	for i := range e.occs {
		if o := &e.occs[i]; o.replace && o.tgt >= 0 && int(o.tgt) < len(e.occs) {
			targets[o.tgt] = true
		}
	}
	for i := range e.occs {
		o := &e.occs[i]
		if !userTurn || o.turn != last || o.b.shell || o.replace || targets[int32(i)] || overlaps(o) {
			continue
		}
		content, size := e.spanOf(o)
		if len(content) < e.opts.MinBlockBytes {
			continue
		}
		h := e.sha(content)
		if !sent(h) {
			continue
		}
		o.sha, o.target, o.rule = h, -1, RuleUnchanged
		name := displayName(e.name(o))
		o.refEsc, o.refName = needsEscape(name), "" // name may view the arena
		if o.b.kind == kindImage {
			o.rule = RuleImage
			o.ref = "[same " + name + " sha256:" + h[:12] + " as " + SessionWhere + "]"
			o.refBytes = len(`{"text":""}`) + o.refJSONLen()
		} else {
			o.ref = "[unchanged: " + name + " sha256:" + h[:12] + ", identical to the copy " + SessionWhere + "]"
			o.refBytes = len(o.ref)
		}
		if o.refBytes*2 > size {
			continue
		}
		o.replace = true
		if o.tp >= 0 {
			taken = append(taken, partSpan{o.tp, o.b.start, o.b.end})
		}
	}
	reps := e.final()
	out := e.emit(reps)
	rep := &Report{}
	if len(reps) > 0 {
		rep.aud = &auditRec{cuts: e.auditCuts(reps), body: e.body}
	}
	rep.Replacements = e.report(reps)
	return out, rep, nil
}

// SessionBlocks returns the distinct blocks of the last content (the new
// turn) of body as it stands, as Report.Blocks lists them: each block
// found there, at least Options.MinBlockBytes, with its hex SHA-256. Call
// it on the body that is actually sent, after Request and Elide: every
// block it lists is there in full, while Report.Blocks of Request also
// lists blocks of the new turn that Request replaced (an older version of
// a file turned into a superseded reference, a document holding a fence),
// which the upstream never saw. The proxy's session mode records these
// hashes as sent (issue 8), so that a later Elide refers only to copies
// the upstream holds.
func SessionBlocks(body []byte, opts Options) ([]Block, error) {
	st := states.Get().(*state)
	defer st.release()
	req, err := scanWith(body, st, 0, limitsOf(&opts))
	if err != nil {
		return nil, err
	}
	if len(req.contents) == 0 {
		return nil, ErrNoContents
	}
	e := newEngine(body, req, &opts, st)
	if err := e.analyse(); err != nil {
		return nil, err
	}
	return e.newTurnBlocks(), nil
}
