#!/usr/bin/env bash
H=/work/main/benchmarks/results/policy/epyc_zen2_2026-12-05/http.sh
REPO=/work/main bash $H /work/s49/http_new 4 8
REPO=/work/s49/old bash $H /work/s49/http_old 4 8
echo done > /work/s49/http_ab.done
