package bench

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/controller/queue"
	"github.com/juice-slurm/juice-slurm/internal/backoff"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
)

// A Micro is one Go micro-benchmark: micro_test.go runs each as BenchmarkXxx (go test -bench), and the driver
// runs them with testing.Benchmark so their figures land in the same results file.
type Micro struct {
	Name string
	F    func(b *testing.B)
}

var microKey = []byte("0123456789abcdef0123456789abcdef")

var microGrant = session.Grant{SessionID: "f0509388-5c1e-4c36-9a4e-3f4f1c1f9e01", Address: "gpu-host-1:43210", GPUs: []int{0}}

func microEnv() (session.Binding, []session.EnvVar) {
	run := reconcile.RunID{Cluster: Cluster, JobID: 12345, Run: 1}
	b := run.Binding()
	b.Reservation = uuid.MustParse("5d7c1a2e-3b4f-4c6d-9e8f-0a1b2c3d4e5f")
	return b, session.Env(mustRequest(), microGrant)
}

// Micros are the micro-benchmarks: the per-job work on the hot paths (the poller parses every listed job's
// request on each changed listing; each ready session is sealed once and opened on every compute node; every
// transition goes through Apply), and the work queue every reservation passes through.
var Micros = []Micro{
	{"ParseRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := request.Parse("juice:v1:pool=demo,gpus=1,vram=1610612736"); err != nil {
				b.Fatal(err)
			}
		}
	}},
	{"ParseRequest/not-a-request", func(b *testing.B) {
		// Most jobs of a shared cluster are not Juice jobs: their comment must be turned down cheaply.
		b.ReportAllocs()
		for b.Loop() {
			_, _ = request.Parse("nightly build of the climate model")
		}
	}},
	{"Request.String", func(b *testing.B) {
		r, _ := request.Parse("juice:v1:pool=demo,gpus=1,vram=1610612736")
		b.ReportAllocs()
		for b.Loop() {
			_ = r.String()
		}
	}},
	{"SealSession", func(b *testing.B) {
		run, env := microEnv()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := session.Seal(microKey, run, env); err != nil {
				b.Fatal(err)
			}
		}
	}},
	{"OpenSession", func(b *testing.B) {
		run, env := microEnv()
		sealed, err := session.Seal(microKey, run, env)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := session.Open(sealed, run, microKey); err != nil {
				b.Fatal(err)
			}
		}
	}},
	{"SessionEnv", func(b *testing.B) {
		req := mustRequest()
		b.ReportAllocs()
		for b.Loop() {
			_ = session.Env(req, microGrant)
		}
	}},
	{"Apply/happy-path", func(b *testing.B) {
		// The five transitions of a served run: pending → requesting → waiting → ready → releasing → released.
		now := time.Now()
		evs := []reconcile.Event{reconcile.EventRequest, reconcile.EventQueued, reconcile.EventActive,
			reconcile.EventUnwanted, reconcile.EventClosed}
		b.ReportAllocs()
		for b.Loop() {
			r := reconcile.Reservation{Status: reconcile.Status{State: reconcile.StatePending}}
			for _, ev := range evs {
				if _, err := reconcile.Apply(&r, ev, "benchmark", now); err != nil {
					b.Fatal(err)
				}
			}
		}
	}},
	{"Lookahead.Select/1000-pending", func(b *testing.B) {
		// One poll's choice over a deep queue: 1,000 pending jobs in 4 pools.
		now := time.Now()
		var cands []reconcile.Candidate
		pools := []string{"a", "b", "c", "d"}
		for i := 0; i < 1000; i++ {
			req, _ := request.Parse("juice:v1:pool=" + pools[i%4] + ",gpus=1")
			cands = append(cands, reconcile.Candidate{Run: reconcile.RunID{Cluster: Cluster, JobID: uint32(i)},
				Request: req, Priority: uint64(i * 7 % 1000), SubmitTime: now, StateReason: "Priority"})
		}
		b.ReportAllocs()
		for b.Loop() {
			_ = reconcile.DefaultLookahead.Select(now, cands)
		}
	}},
	{"Queue.Add+Get+Done", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		q := queue.New[uuid.UUID](ctx, backoff.Policy{Base: time.Millisecond, Max: time.Second})
		id := uuid.New()
		b.ReportAllocs()
		for b.Loop() {
			q.Add(id)
			k, _ := q.Get()
			q.Done(k)
		}
	}},
}
