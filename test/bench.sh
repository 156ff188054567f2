#!/usr/bin/env bash
# make bench: every benchmark, figures printed and collected in test/results/bench.md. Nothing is asserted on time.
#   P1, P3, P5, P6 and micro-benchmarks: Go, PostgreSQL only (test/bench/cmd/juice-bench)
#   P2, P4: on the real Slurm cluster with the demo's simulator and controller (test/bench/cmd/juice-bench-slurm)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p test/results
go run ./test/bench/cmd/juice-bench -out test/results/bench-go.md
# P2 and P4 measure our overhead, so the simulator answers at once and the controller polls every 500 ms; the
# demo's settings (1 s polls, a 1 s activation) come back afterwards.
JUICE_TESTBED_SIM_TIMING=instant JUICE_TESTBED_POLL=500ms bash test/testbed.sh services-restart
go run ./test/bench/cmd/juice-bench-slurm -poll "500 ms" -sim "no delays" -out test/results/bench-slurm.md "$@"
bash test/testbed.sh services-restart
# P7 (issue 11 item 8) with the demo's settings back: a job array through the demo's 4-GPU pool, plain and with
# Juice, beside the floor (BENCH_ARRAY elements, 201 as in the issue). slurmctld starts far more elements at once
# than 4 GPUs serve, so they wait in their prologs: with the prolog's default wait (4 minutes), not the test bed's
# 15 s, which would fail and requeue them; the test bed's wiring comes back afterwards.
JUICE_TESTBED_PROLOG_WAIT=240s bash test/testbed.sh wire
bash test/testbed.sh services-restart
go run ./test/bench/cmd/juice-bench-slurm -p2-jobs 0 -p4-held 0 -array "${BENCH_ARRAY:-201}" -poll "1 s" \
	-sim "500 ms tick, 1 s activation, 500 ms cancel; prolog wait 4 min" -out test/results/bench-array.md
# Bursts (issue 14 item 6) with the same settings: BENCH_BURST jobs at once, plain, Juice, and Juice with the
# controller restarted without look-ahead (JUICE_TESTBED_CONTROLLER_ARGS), interleaved over five rounds.
go run ./test/bench/cmd/juice-bench-slurm -p2-jobs 0 -p4-held 0 -burst "${BENCH_BURST:-30}" -burst-rounds 5 -poll "1 s" \
	-sim "500 ms tick, 1 s activation, 500 ms cancel; prolog wait 4 min" -out test/results/bench-burst.md
# Issue 23: the pools as Slurm licenses, on and off, beside plain Slurm: the array and a burst on the demo's 4-GPU
# pool, where a full pool shows (test/bench/licenses.sh, also make bench-licenses).
bash test/bench/licenses.sh
bash test/testbed.sh wire
{
	echo "# juice-slurm benchmark results"
	echo
	echo "Put together by \`make bench\` ($(date -u '+%Y-%m-%d %H:%M') UTC, $(nproc) cores) from the parts below, each naming its own run. Targets from issue 7: P1 p99 ≤ 20 ms,"
	echo "P2 ≤ 1.10, P3 ≥ 2,000/s, P4 one or two requests per poll, P5 ≤ 100 MiB, P6 p99 ≤ 10 ms without busy polling;"
	echo "from issue 14: P1 p99 ≤ 5 ms, P5 ≤ 200 MiB at 100,000 runs, a standing cost under 5 % of a core, bursts ≤ 1.10."
	echo
	cat test/results/bench-compare.md
	echo
	cat test/results/bench-go.md
	echo
	# make bench-scale's (the 26.05 cluster with a large queue: its own target, it takes long)
	cat test/results/bench-scale.md
	echo
	cat test/results/bench-slurm.md
	echo
	cat test/results/bench-array.md
	echo
	cat test/results/bench-burst.md
	echo
	cat test/results/bench-licenses.md
} >test/results/bench.md
echo "results: test/results/bench.md"
