#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every package's GPU-marked tests in one device call, from the repository root, after changes
# that touch native code shared across packages (the root package's CUDA/UCX/HMAC headers, the
# loaders built on them): bash ci/gpu/gpu_tests.sh [OUT_DIR]
#   builds root, shmem, viz, ep, cco, io, umbp (ci/gpu/setup.sh), then under MPS runs, each with its
#   own time limit so one hang cannot eat the call: the root package's header checks against the
#   real cuda.h, mori-shmem's, mori-io's and mori-cco's gpu tests, and mori-umbp's HBM tests.
#   One log per package in OUT_DIR; the summary (pass/fail counts per package) in gpu-tests.log.
#   GPU_SUITES="shmem cco" runs only the suites named (all five take more than one 600 s call);
#   GPU_SUITE_LIMIT=S caps every suite's limit at S seconds.
set -uo pipefail
out=${1:-${OUT:-gpu-tests}}
mkdir -p "$out"
log="$out/gpu-tests.log"
step() { echo "== $* ($(date +%T))" | tee -a "$log"; }
MORI_GPU_PACKAGES="shmem viz ep cco io umbp" source ci/gpu/setup.sh >>"$log" 2>&1 || { echo "setup failed" | tee -a "$log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
suite() {  # suite NAME SECONDS PYTEST_ARGS...: one package's tests, each test's outcome as it ends
  local name=$1 limit=$2; shift 2
  limit=$(( limit < ${GPU_SUITE_LIMIT:-$limit} ? limit : ${GPU_SUITE_LIMIT:-$limit} ))
  case " ${GPU_SUITES-root-headers shmem io cco umbp-hbm} " in *" $name "*) ;; *) return 0 ;; esac
  step "$name ($*)"
  timeout "$limit" python3 -m pytest -v -rfE -p no:cacheprovider "$@" >"$out/$name.log" 2>&1
  echo "rc=$?" >>"$out/$name.log"
  grep -E "(FAILED|ERROR)( |$)|passed|failed|rc=" "$out/$name.log" | tail -15 | tee -a "$log"
}
# Limits from the H100 run of 2026-12-05: shmem's gpu tests outlast 200 s, io's 90 s.
suite root-headers 60 packages/mori/tests/test_shared_headers.py
suite shmem 420 packages/mori-shmem/tests -m gpu
suite io 300 packages/mori-io/tests -k "gpu or p2p"
suite cco 240 packages/mori-cco/tests -m gpu
suite umbp-hbm 90 packages/mori-umbp/tests/test_hbm_gpu.py
step done
