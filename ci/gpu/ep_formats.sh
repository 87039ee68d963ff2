#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU checks and figures of mori-ep's payload formats and routing handles (issue #33), one
# device call, from the repository root: bash ci/gpu/ep_formats.sh [OUT_DIR]
#   under MPS: the gpu-marked tests of the payload formats, handles and struct mirrors; then
#   mori-ep-bench on 8 PEs (IntraNode, 128 and 4096 tokens) for bf16/fp8 (the baseline), fp4,
#   nvfp4, mxfp8 dispatch and the fp4_blockwise combine, each verified, JSON per case.
#   EP_FORMATS_TESTS=0 skips the tests (EP_TESTS_TIMEOUT bounds them, 420 s; EP_TESTS_K="jax" picks
#   some: the whole selection outlasts one call); EP_FORMATS_CASES="fp4 ..."
#   runs only the cases named.
set -uo pipefail
out=${1:-${OUT:-ep-formats}}
mkdir -p "$out"
log="$out/ep-formats.log"
step() { echo "== $* ($(date +%T))" | tee -a "$log"; }
MORI_GPU_PACKAGES="shmem viz ep" source ci/gpu/setup.sh >>"$log" 2>&1 || { echo "setup failed" | tee -a "$log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
# The JSON names carry the card (h100, h200), so runs on either kind sit side by side.
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE 'h[0-9]+|a[0-9]+|b[0-9]+' | head -1 | tr 'A-Z' 'a-z')
if [ "${EP_FORMATS_TESTS:-1}" != 0 ]; then
  step "gpu tests: payload formats, handles, struct mirrors, mori.jax"
  timeout ${EP_TESTS_TIMEOUT:-420} python3 -m pytest -q -rA -p no:cacheprovider packages/mori-ep/tests -m gpu \
    -k "${EP_TESTS_K:-payload or handle or struct or fp8_formats or jax}" >"$out/ep-gpu-tests.log" 2>&1
  grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|passed|failed" "$out/ep-gpu-tests.log" | tail -40 | tee -a "$log"
fi
bench() {  # bench NAME ARGS...: one verified mori-ep-bench run
  local name=$1; shift
  step "bench $name: $*"
  timeout ${EP_BENCH_TIMEOUT:-100} mori-ep-bench --backend cuda --world-size 8 --kernel-type IntraNode --json "$out/${card:-gpu}-ep8-$name.json" "$@" \
    >"$out/bench-$name.log" 2>&1
  echo "rc=$?" >>"$out/bench-$name.log"
  tail -12 "$out/bench-$name.log" | tee -a "$log"
}
declare -A cases=(
  [baseline-fp8]="--max-tokens 4096 128"
  [fp4]="--max-tokens 4096 128 --dispatch-dtype fp4"
  [nvfp4]="--max-tokens 4096 128 --dispatch-dtype nvfp4"
  [mxfp8]="--max-tokens 4096 128 --dispatch-dtype mxfp8"
  [combine-fp4]="--max-tokens 4096 128 --zero-copy 0 --combine-quant fp4_blockwise"
)
# EP_FORMATS_CASES picks and orders the cases (all five when unset; none when empty).
for name in ${EP_FORMATS_CASES-baseline-fp8 fp4 nvfp4 mxfp8 combine-fp4}; do
  # shellcheck disable=SC2086  # the case's arguments split on purpose
  bench "$name" ${cases[$name]}
done
step done
