package rewrite

import "slices"

// describe fills the fields of rep that describe the rewritten request
// (TextBytes, OtherBytes, Contents, Media) from the request as scanned and
// the replacements in rep, without emitting or decoding it again.
func (req *request) describe(rep *Report) {
	rep.Contents = len(req.contents)
	rep.OtherBytes = req.otherBytes
	media := 0
	for i := range req.contents {
		for j := range req.contents[i].parts {
			switch p := &req.contents[i].parts[j]; p.kind {
			case partText:
				rep.TextBytes += p.dec.size
			default:
				rep.OtherBytes += p.obj.end - p.obj.start
				if p.media {
					media++
				}
			}
		}
	}
	rep.TextBytes += rep.subText
	rep.OtherBytes += rep.subOther
	for _, r := range rep.Replacements {
		if r.Source == SourceJSONText || r.Source == SourceToolResult {
			continue // in subText and subOther
		}
		if r.Rule == RuleImage {
			// An inlineData part became a text part holding the reference.
			rep.OtherBytes -= r.Bytes
			rep.TextBytes += len(r.Reference)
			media--
			continue
		}
		rep.TextBytes -= r.Bytes - r.RefBytes
	}
	rep.Media = media > 0 || req.cached
}

// blockKinds names each blockKind for Block.Kind.
var blockKinds = [...]string{
	kindFence:  "code",
	kindTag:    "document",
	kindBanner: "document",
	kindTree:   "secondary",
	kindTabs:   "secondary",
	kindRun:    "run",
	kindImage:  "image",
	kindValue:  "document",
	kindTool:   "tool_result",
}

// newTurnBlocks returns the distinct blocks of the last content that are
// at least MinBlockBytes, in request order, then the runs found there.
func (e *engine) newTurnBlocks() []Block {
	last := len(e.req.contents) - 1
	var out []Block
	var seen map[string]bool // once out is long; before, out is searched
	add := func(o *occ) {
		if o.turn != last || o.b.shell {
			return
		}
		content := o.content
		if o.b.kind != kindImage {
			content = e.parts[o.tp].text[o.b.start:o.b.end]
		}
		if len(content) < e.opts.MinBlockBytes {
			return
		}
		h := o.sha // set by reference (or Elide): the SHA-256 of this span
		if h == "" {
			h = e.spanSHA(o)
		}
		if seen == nil && len(out) >= 16 {
			seen = make(map[string]bool, 2*len(out))
			for _, b := range out {
				seen[b.SHA256] = true
			}
		}
		if seen[h] || seen == nil && slices.ContainsFunc(out, func(b Block) bool { return b.SHA256 == h }) {
			return
		}
		if seen != nil {
			seen[h] = true
		}
		out = append(out, Block{SHA256: h, Bytes: len(content), Kind: blockKinds[o.b.kind]})
	}
	for i := range e.occs {
		add(&e.occs[i])
	}
	for i := range e.runs {
		add(&e.runs[i])
	}
	return out
}
