#!/bin/sh
# The Go benchmarks that need no Slurm (P1, P3, P5, P6 and the micro-benchmarks), for make bench:
# prints the figures and writes test/results/bench-go.md. Needs the test bed's PostgreSQL (bash test/testbed.sh up);
# takes about two minutes on 2 cores. Extra arguments go to juice-bench (e.g. -only p1,p6).
set -eu
cd "$(dirname "$0")/../.."
exec go run ./test/bench/cmd/juice-bench -out test/results/bench-go.md "$@"
