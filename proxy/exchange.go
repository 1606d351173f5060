package proxy

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
	h.opts.OnServed(st.tenant, t.text.String(), t.textTruncated)
}
