package proxy

import "net/http"

// served calls Options.OnServed for st, a generate request whose 200
// response body was just read in full: the tap calls it before the body's
// last bytes are written to the client, so that a client sending its next
// turn the instant the answer arrives finds the answer recorded (issue 13,
// defect 4). OnExchange, called after the response, is too late for that.
func (h *Handler) served(st *reqState) {
	t := st.tb.t
	t.finish() // at most once; finish does it again for nothing
	if t.text.Len() == 0 {
		return
	}
	if w := t.text.w; w != nil {
		t.text.w = nil
		w.Served(t.textTruncated)
		return
	}
	h.opts.OnServed(st.tenant, t.text.String(), t.textTruncated)
}

// newTap returns the tap of a generate response res, or nil when its
// encoding is not one the tap reads. It reads the model's text only when
// something takes it: OnExchange (unless ExchangeWithoutText), OnServed or
// ServedText; and keeps a copy of it only for OnExchange and OnServed.
func (h *Handler) newTap(res *http.Response, st *reqState) *tap {
	o := &h.opts
	serve := st.upStatus == http.StatusOK && (o.OnServed != nil || o.ServedText != nil)
	exchange := o.OnExchange != nil && !o.ExchangeWithoutText
	t := newTap(headerValue(res.Header, hdrContentEncoding), exchange || serve)
	if t == nil {
		return nil
	}
	t.budget = h.budget
	t.text.keep = exchange || (serve && o.ServedText == nil)
	if serve && o.ServedText != nil {
		t.text.w = o.ServedText(st.tenant)
	}
	return t
}
