package agentemu

import (
	"strings"
	"testing"
	"time"
)

const gib = uint64(1) << 30

func kinds(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Kind+":"+e.Session)
	}
	return out
}

func TestMachineAssignedThenCanceling(t *testing.T) {
	m := NewMachine([]uint64{24 * gib, 24 * gib})
	now := time.Unix(1000, 0)

	// A tick with nothing: the update is a bare heartbeat with one metrics entry per GPU.
	u, sent := m.Update(now, "A")
	if u.ID != "A" || u.State != AgentActive || len(u.Sessions) != 0 || len(u.GPUs) != 2 || len(sent) != 0 {
		t.Fatalf("idle update %+v %v", u, sent)
	}

	evs, err := m.Observe(now, []Session{{ID: "s1", State: SessionAssigned, GPUs: []SessionGPU{{Index: 1, VRAMRequired: 8 * gib}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(evs); len(got) != 1 || got[0] != EventAssigned+":s1" {
		t.Fatalf("events %v", got)
	}
	if !m.Holds("s1") {
		t.Fatal("s1 not held")
	}
	u, sent = m.Update(now, "A")
	if u.Sessions["s1"].State != SessionActive || u.Sessions["s1"].Connections == nil || len(sent) != 1 || sent[0].Kind != EventActive {
		t.Fatalf("update %+v sent %v", u, sent)
	}
	if u.GPUs[1].VRAMUsed != 8*gib || u.GPUs[0].VRAMUsed != 0 {
		t.Errorf("metrics %+v", u.GPUs)
	}
	snap := m.Snapshot()
	if snap.GPUs[1].VRAMFree != int64(16*gib) || snap.GPUs[1].Sessions != 1 || len(snap.Sessions) != 1 || snap.Sessions[0].Reported != now {
		t.Errorf("snapshot %+v", snap)
	}

	// The controller reports it active from now on: nothing to do, nothing to send.
	if evs, err := m.Observe(now, []Session{{ID: "s1", State: SessionActive}}); err != nil || len(evs) != 0 {
		t.Fatalf("active: %v %v", evs, err)
	}
	if u, _ := m.Update(now, "A"); len(u.Sessions) != 0 {
		t.Fatalf("update after active %+v", u)
	}

	later := now.Add(5 * time.Second)
	evs, err = m.Observe(later, []Session{{ID: "s1", State: SessionCanceling}})
	if err != nil || len(evs) != 1 || evs[0].Kind != EventCanceling {
		t.Fatalf("canceling: %v %v", evs, err)
	}
	if m.Holds("s1") {
		t.Fatal("s1 still held")
	}
	u, sent = m.Update(later, "A")
	if u.Sessions["s1"].State != SessionClosed || sent[0].Kind != EventClosedReport {
		t.Fatalf("update %+v", u)
	}
	snap = m.Snapshot()
	if snap.GPUs[1].VRAMFree != int64(24*gib) || len(snap.Closed) != 1 || snap.Closed[0].Canceling != later {
		t.Errorf("snapshot after close %+v", snap)
	}
}

// The real agent exits when told to cancel a session it does not hold (the controller reopens a closed
// session as canceling when it is cancelled again).
func TestMachineCancelUnknownIsFatal(t *testing.T) {
	m := NewMachine([]uint64{gib})
	evs, err := m.Observe(time.Now(), []Session{{ID: "ghost", State: SessionCanceling}})
	if err == nil || !strings.Contains(err.Error(), "unable to cancel session") {
		t.Fatalf("err %v", err)
	}
	if len(evs) != 1 || evs[0].Kind != EventCancelUnknown {
		t.Fatalf("events %v", evs)
	}
}

// A session that is closed locally but whose "closed" was not delivered is still listed canceling: not an error.
func TestMachineCancelWhileClosedPending(t *testing.T) {
	m := NewMachine([]uint64{gib})
	now := time.Now()
	_, _ = m.Observe(now, []Session{{ID: "s", State: SessionAssigned, GPUs: []SessionGPU{{Index: 0}}}})
	_, _ = m.Update(now, "A")
	_, _ = m.Observe(now, []Session{{ID: "s", State: SessionCanceling}})
	u, _ := m.Update(now, "A")
	m.Requeue(u) // the PUT failed (keepGoing)
	if _, err := m.Observe(now, []Session{{ID: "s", State: SessionCanceling}}); err != nil {
		t.Fatalf("err %v", err)
	}
	if u, _ := m.Update(now, "A"); u.Sessions["s"].State != SessionClosed {
		t.Fatalf("requeued update %+v", u)
	}
}

func TestMachineBadAssignments(t *testing.T) {
	m := NewMachine([]uint64{gib, gib})
	_, err := m.Observe(time.Now(), []Session{
		{ID: "none", State: SessionAssigned},
		{ID: "range", State: SessionAssigned, GPUs: []SessionGPU{{Index: 2}}},
		{ID: "ok", State: SessionAssigned, GPUs: []SessionGPU{{Index: 0}}},
	})
	if err == nil || !strings.Contains(err.Error(), "no GPUs") || !strings.Contains(err.Error(), "index 2") {
		t.Fatalf("err %v", err)
	}
	if m.Holds("none") || m.Holds("range") || !m.Holds("ok") {
		t.Fatalf("held: %+v", m.Snapshot().Sessions)
	}
}

// Like the legacy controller's whole-GPU placement, a session may name every GPU of the agent and several
// sessions may share GPUs; VRAM is subtracted unchecked (it may go below zero, as the real agent's wraps).
func TestMachineStackingAndOvercommit(t *testing.T) {
	m := NewMachine([]uint64{2 * gib, 2 * gib})
	now := time.Now()
	all := []SessionGPU{{Index: 0, VRAMRequired: 3 * gib / 2}, {Index: 1, VRAMRequired: 3 * gib / 2}}
	if _, err := m.Observe(now, []Session{{ID: "a", State: SessionAssigned, GPUs: all}, {ID: "b", State: SessionAssigned, GPUs: all}}); err != nil {
		t.Fatal(err)
	}
	snap := m.Snapshot()
	if snap.GPUs[0].VRAMFree != -int64(gib) || snap.GPUs[0].Sessions != 2 {
		t.Fatalf("snapshot %+v", snap.GPUs)
	}
	u, _ := m.Update(now, "A")
	if len(u.Sessions) != 2 || u.GPUs[0].VRAMUsed != 3*gib {
		t.Fatalf("update %+v", u)
	}
}

func TestMachineAssignedAgainRepeatsActive(t *testing.T) {
	m := NewMachine([]uint64{4 * gib})
	now := time.Now()
	s := Session{ID: "s", State: SessionAssigned, GPUs: []SessionGPU{{Index: 0, VRAMRequired: gib}}}
	_, _ = m.Observe(now, []Session{s})
	_, _ = m.Update(now, "A")
	evs, err := m.Observe(now, []Session{s})
	if err != nil || len(evs) != 1 || evs[0].Kind != EventAssignedAgain {
		t.Fatalf("%v %v", evs, err)
	}
	if free := m.Snapshot().GPUs[0].VRAMFree; free != int64(3*gib) {
		t.Fatalf("VRAM taken twice: free %d", free)
	}
	if u, _ := m.Update(now, "A"); u.Sessions["s"].State != SessionActive {
		t.Fatalf("update %+v", u)
	}
}

func TestMachineForget(t *testing.T) {
	m := NewMachine([]uint64{gib})
	_, _ = m.Observe(time.Now(), []Session{{ID: "s", State: SessionAssigned, GPUs: []SessionGPU{{Index: 0, VRAMRequired: gib}}}})
	m.Forget()
	snap := m.Snapshot()
	if len(snap.Sessions) != 0 || len(snap.Pending) != 0 || snap.GPUs[0].VRAMFree != int64(gib) {
		t.Fatalf("after Forget %+v", snap)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]Size{"24GiB": Size(24 * gib), "1.5GiB": Size(3 * gib / 2), "512MiB": 512 << 20, "80GB": 80e9, "7B": 7} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"24", "GiB", "-1GiB", "1.5 XB", ""} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func TestSpecs(t *testing.T) {
	const p1 = "5a0e8a53-7f3c-4b8e-9d65-6c1f0a2b3c4d"
	c := Config{Controller: "x:1", Pools: map[string]string{"test": p1}, Agents: []AgentConfig{
		{Name: "a", Count: 2, Pool: "test", GPUs: 2, VRAM: Size(gib)},
		{Name: "b", Pool: p1, GPUs: 1, VRAM: Size(gib), Address: "10.0.0.1:43210"},
	}}
	specs, err := c.Specs()
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 3 || specs[0].Name != "a-1" || specs[1].Name != "a-2" || specs[0].PoolID != p1 || specs[2].Address != "10.0.0.1:43210" {
		t.Fatalf("specs %+v", specs)
	}
	if specs[0].Address == specs[1].Address {
		t.Errorf("same address for two agents")
	}
	c.Agents[0].Pool = "nope"
	if _, err := c.Specs(); err == nil {
		t.Errorf("unknown pool name accepted")
	}
	if _, err := (Config{Controller: "x:1", Admin: "0.0.0.0:1", Agents: c.Agents}).withDefaults(); err == nil {
		t.Errorf("admin API on a non-loopback address accepted")
	}
}
