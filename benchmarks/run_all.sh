#!/usr/bin/env bash
# The benchmark runs behind BENCHMARKS.md (CPU, bf16, greedy). ~55 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
T=.venv/bin/treespec
R=benchmarks/results
P=benchmarks/plots
mkdir -p "$R" "$P"
$T bench --dataset humaneval --limit 20 --max-new-tokens 128 --baseline hf-assisted --json $R/humaneval.json --plots $P/humaneval
$T bench --dataset spec_bench --limit 24 --max-new-tokens 128 --baseline hf-assisted --json $R/spec_bench.json --plots $P/spec_bench
$T bench --dataset humaneval --limit 4 --max-new-tokens 128 --tree-sizes 1,4,8,16,32,64 --concurrency 1,2,4,8 --json $R/sweeps.json --plots $P/sweeps
$T bench --dataset humaneval --limit 1 --max-new-tokens 2048 --ignore-eos --json $R/long.json --plots $P/long
