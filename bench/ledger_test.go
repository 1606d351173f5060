package bench

import (
	"strings"
	"testing"
)

func TestCheckLedger(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	s := &Savings{Sessions: []SessionResult{
		{Name: "close", Naive: Tokens{Billed: 10}, Proxy: Tokens{Billed: 4}, Ledger: f(6.5)},               // 8% of $6
		{Name: "far", Naive: Tokens{Billed: 10}, Proxy: Tokens{Billed: 4}, Ledger: f(6.7)},                 // 12% of $6
		{Name: "small saving", Naive: Tokens{Billed: 10}, Proxy: Tokens{Billed: 9.9}, Ledger: f(0.105)},    // 5% of $0.10
		{Name: "small saving off", Naive: Tokens{Billed: 10}, Proxy: Tokens{Billed: 9.9}, Ledger: f(0.19)}, // $0.09 off: 90% of the saving, 0.9% of the bill
		{Name: "control", Naive: Tokens{Billed: 10}, Proxy: Tokens{Billed: 10}, Ledger: f(0)},
		{Name: "control off", Naive: Tokens{Billed: 10}, Proxy: Tokens{Billed: 10}, Ledger: f(0.001)},
		{Name: "no ledger", Naive: Tokens{Billed: 10}, Proxy: Tokens{Billed: 1}},
	}}
	err := CheckLedger(s)
	if err == nil {
		t.Fatal("CheckLedger = nil, want the far and control off sessions named")
	}
	for _, name := range []string{"far", "small saving off", "control off"} {
		if !strings.Contains(err.Error(), "session "+name+":") {
			t.Errorf("CheckLedger error %q does not name %s", err, name)
		}
	}
	for _, name := range []string{"close", "small saving", "control", "no ledger"} {
		if strings.Contains(err.Error(), "session "+name+":") {
			t.Errorf("CheckLedger error %q names %s", err, name)
		}
	}
}

// A pending ledger miss is listed, not failed; a pending session whose
// ledger is within the limit fails until its entry is removed.
func TestCheckLedgerPending(t *testing.T) {
	defer func(p map[string]string) { pendingLedger = p }(pendingLedger)
	pendingLedger = map[string]string{"far": "cause"}
	f := func(v float64) *float64 { return &v }
	far := SessionResult{Name: "far", Naive: Tokens{Billed: 10}, Proxy: Tokens{Billed: 4}, Ledger: f(6.7)}
	s := &Savings{Sessions: []SessionResult{far}}
	if err := CheckLedger(s); err != nil {
		t.Errorf("CheckLedger(pending miss) = %v, want nil", err)
	}
	if m := PendingLedgerMisses(s); len(m) != 1 || !strings.Contains(m[0], "pending: cause") {
		t.Errorf("PendingLedgerMisses = %q", m)
	}
	s.Sessions[0].Ledger = f(6.1)
	if err := CheckLedger(s); err == nil || !strings.Contains(err.Error(), "remove it from pendingLedger") {
		t.Errorf("CheckLedger(pending session within the limit) = %v, want an error", err)
	}
}
