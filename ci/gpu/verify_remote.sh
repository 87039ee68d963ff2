#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU checks of the paths that cross "hosts" (mori-shmem's device proxy, mori-ep's inter-node
# types), in two stages that each fit one device call (under 10 minutes), from the repository root:
#   bash ci/gpu/verify_remote.sh tests [OUT_DIR]
#   bash ci/gpu/verify_remote.sh bench [OUT_DIR]
# Each builds shmem, viz and ep (ci/gpu/setup.sh), then runs, every step bounded by `timeout`:
#   tests: under MPS, test_device_proxy.py and test_internode.py -k cuda (every type, up to 2 x 4 PEs);
#   bench: compute-sanitizer memcheck of one InterNodeV1 case on 2 x 1 PEs without MPS (the
#          sanitizer does not attach to MPS clients); then under MPS mori-ep-bench for each
#          inter-node type (2 x 2 PEs, 128 tokens) and mori-shmem-bench --device-proxy.
# Everything lands in OUT_DIR (default $OUT, else ./verify-remote) as one log and one tarball, since
# the device tool returns at most 8 files.
set -uo pipefail
stage=${1:-}
case $stage in
  tests | bench) ;;
  *) echo "usage: verify_remote.sh tests|bench [OUT_DIR]" >&2; exit 2 ;;
esac
out=${2:-${OUT:-verify-remote}}
work=/tmp/verify-remote-$stage
mkdir -p "$out" "$work"
log="$out/verify-remote-$stage.log"
step() { echo "== $* ($(date +%T))" | tee -a "$log"; }

run_tests() {
  step test_device_proxy
  timeout 130 python3 -m pytest -q -p no:cacheprovider packages/mori-shmem/tests/test_device_proxy.py 2>&1 \
    | tail -5 | tee -a "$log"
  step "test_internode -k cuda"
  timeout 400 python3 -m pytest -q -rA -p no:cacheprovider packages/mori-ep/tests/test_internode.py -k cuda \
    >"$work/internode.log" 2>&1
  grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$work/internode.log" | tee -a "$log"
  grep -E "^E .*(Error|rank [0-9])" "$work/internode.log" | sort | uniq -c | sort -rn | head -20 >>"$log"
}

run_bench() {
  step "memcheck, InterNodeV1 2x1, no MPS"
  echo quit | nvidia-cuda-mps-control
  (
    unset CUDA_MPS_PIPE_DIRECTORY
    timeout 120 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 \
      python3 -m pytest -q -p no:cacheprovider packages/mori-ep/tests/test_internode.py -k "cuda and InterNodeV1-2x1"
  ) >"$work/memcheck.log" 2>&1
  echo "memcheck exit $?" | tee -a "$log"
  grep -E "ERROR SUMMARY|passed|failed" "$work/memcheck.log" | tee -a "$log"
  nvidia-cuda-mps-control -d

  for type in InterNodeV1 InterNodeV1LL InterNode AsyncLL; do
    step "mori-ep-bench $type 2x2"
    timeout 75 mori-ep-bench --world-size 4 --max-tokens 128 --iterations 20 --kernel-type "$type" \
      --json "$work/ep-$type.json" >"$work/ep-$type.log" 2>&1
    echo "exit $?" >>"$work/ep-$type.log"
    grep -vE "^\[#" "$work/ep-$type.log" | tail -40 >>"$log"
  done
  # Last: a PE killed by its timeout can leave MPS refusing new clients.
  step "mori-shmem-bench --device-proxy"
  timeout 200 mori-shmem-bench --device-proxy --max-size 16M --output "$work/device-proxy.json" 2>&1 \
    | tail -25 | tee -a "$log"
}

step setup
export MORI_GPU_PACKAGES="shmem viz ep"
# shellcheck source=/dev/null
source ci/gpu/setup.sh >>"$log" 2>&1 || { echo "setup failed" | tee -a "$log"; exit 1; }
export CUDA_MODULE_LOADING=EAGER
"run_$stage"
tar czf "$out/verify-remote-$stage.tgz" -C "$work" .
step done
