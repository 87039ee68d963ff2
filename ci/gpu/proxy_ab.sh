#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Same-run A/B of mori-shmem's device proxy on the GPU machine (docs/benchmarks/shmem.md):
#   bash ci/gpu/proxy_ab.sh STAGE[,STAGE...] [BASE_SHMEM_DIR]
# builds mori-shmem from this tree, or from $NEW_SHMEM_DIR when set ("new"), and, when BASE_SHMEM_DIR is given (a copy of an older
# packages/mori-shmem), that one too ("base"), each into its own directory, then runs STAGE:
#   sweep: mori-shmem-bench --device-proxy on new, 4 KiB .. 64 MiB (or $SWEEP_SIZES), with the proxy's debug tally;
#   tests: test_device_proxy.py on new (under MPS);
#   base:  1 .. 16 MiB on base ($BASE_SIZES: other bench size arguments);
#   ab:    1 .. 16 MiB on new, and on new built with $AB_FLAGS (MORI_JIT_EXTRA_FLAGS, e.g. a define
#          that switches a device-side variant) when set, and on new with $AB_ENV (NAME=VALUE ..., e.g.
#          a host-side setting) in the PEs' environment when set;
#   rounds: $ROUNDS (3) rounds of base and ab, the order alternating, each round's JSON in
#          $OUT/rounds.tgz, and a table of each build's median and range per size and of the
#          put-with-signal latency (one run is within this machine's spread: 20 % between runs);
#   arms:  $ROUNDS (2) rounds of new with each arm of $ARMS (NAME=VALUE[,...] each) in the PEs' environment, the order rotating;
#   ep:    builds mori-viz and mori-ep against new, then mori-ep-bench for each inter-node type
#          (2 x 2 PEs or $EP_WORLD as two nodes, $EP_TOKENS tokens, verified, beside a socket copy), each again with
#          $EP_ENV (NAME=VALUE ...) in the PEs' environment when set, and test_internode.py -k cuda ($EP_TEST_K);
#   sanitize: compute-sanitizer memcheck and racecheck of test_device_proxy.py's all-remote case,
#          without MPS (the sanitizer does not attach to MPS clients);
#   sanitize-ep: the same over the inter-node EP kernels: builds mori-viz and mori-ep against new,
#          then test_internode.py's two-host cases of one PE per host ($SANITIZE_EP_K, -k), no MPS;
#   pytest: builds mori-viz, mori-ep and mori-cco against new, then runs pytest with $PYTEST_ARGS (paths
#          and -k of those packages' tests) under MPS, $PYTEST_TIMEOUT s (300) at most;
#   doorbell: ci/gpu/doorbell_probe.py (how long the host takes to tell a running kernel something),
#          without MPS, under MPS, and two at once under MPS;
#   hang:  the small-size hang (docs/benchmarks/shmem.md): 4 KiB puts on new, each PE's threads'
#          native stacks (cuda-gdb) $HANG_AFTER s (45) in, then Python's (faulthandler); with
#          $HANG_ENV (e.g. CUDA_DEVICE_MAX_CONNECTIONS=32) in the PEs' environment when set.
# Output (logs, JSON) lands in $OUT (or ./proxy-ab); with PACK=1, packed at the end into $OUT.tgz
# and the folder removed (the device tool brings back only a few files: a call's others are lost).
# Needs .whl/ as ci/gpu/setup.sh does.
set -uo pipefail
stages=${1:?usage: proxy_ab.sh STAGE[,STAGE...] [BASE_SHMEM_DIR] with STAGE in sweep, tests, base, ab, rounds, arms, ep, sanitize, sanitize-ep, pytest, hang, doorbell}
base_dir=${2:-}
out=${OUT:-proxy-ab}
mkdir -p "$out"
log="$out/proxy-ab.log"
step() { echo "== $* ($(date +%T))" | tee -a "$log"; }

tools=/tmp/proxy-ab-tools
if [ ! -d "$tools" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$tools" .whl/*.whl || exit 1
fi
export PYTHONPATH="$tools" PATH="$tools/bin:$PATH" PYTHONUNBUFFERED=1 CUDA_MODULE_LOADING=EAGER

build() {  # build SOURCE_DIR NAME: the wheel into /tmp/proxy-ab-NAME (kept while the machine is warm)
  local site=/tmp/proxy-ab-$2
  [ -d "$site" ] && return 0
  step "build $2 from $1"
  rm -rf "/tmp/proxy-ab-wheel-$2"
  python3 -m pip wheel -q --no-deps --no-build-isolation -w "/tmp/proxy-ab-wheel-$2" "$1" >>"$log" 2>&1 &&
    python3 -m pip install -q --no-deps --no-compile --target "$site" "/tmp/proxy-ab-wheel-$2"/*.whl >>"$log" 2>&1
}
build packages/mori root || exit 1
# mori-shmem's meson.build asks the root package for its headers (mori.get_include()).
export PYTHONPATH="/tmp/proxy-ab-root:$PYTHONPATH"
new_dir=${NEW_SHMEM_DIR:-packages/mori-shmem}
build "$new_dir" new || exit 1
[ -n "$base_dir" ] && { build "$base_dir" base || exit 1; }

with() {  # with NAME CMD...: CMD with that build of mori-shmem (and viz, ep once built) first on the path
  local site=/tmp/proxy-ab-$1
  shift
  PYTHONPATH="$site:/tmp/proxy-ab-viz:/tmp/proxy-ab-ep:/tmp/proxy-ab-cco:/tmp/proxy-ab-root:$tools" \
    PATH="$site/bin:/tmp/proxy-ab-ep/bin:$PATH" "$@"
}

mps_on() {
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d 2>/dev/null
}
# A PE left running by a killed run (timeout kills the bench, not the PEs it spawned) keeps the MPS
# server refusing new clients with CUDA_ERROR_LAUNCH_FAILED: kill such PEs first.
mps_off() {
  pkill -9 -f multiprocessing.spawn 2>/dev/null
  echo quit | nvidia-cuda-mps-control 2>/dev/null
  sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY
}

bench() {  # bench NAME LABEL ARGS...: under a fresh MPS daemon (a PE that died can leave one refusing clients)
  local name=$1 label=$2
  shift 2
  mps_off
  mps_on
  step "bench $label"
  with "$name" timeout "${BENCH_TIMEOUT:-150}" mori-shmem-bench --device-proxy --output "$out/proxy-$label.json" "$@" \
    >"$out/proxy-$label.out" 2>&1
  echo "exit $?" >>"$out/proxy-$label.out"
  grep -vE "^\[#|DEBUG|debug" "$out/proxy-$label.out" | tail -25 | tee -a "$log"
  grep -E "device proxy carried out" "$out/proxy-$label.out" | tee -a "$log"
}

bench_new() {  # the ab stage's runs: new, new built with $AB_FLAGS and new run with $AB_ENV, each when set
  bench new new --min-size 1M --max-size 16M
  if [ -n "${AB_FLAGS:-}" ]; then MORI_JIT_EXTRA_FLAGS="$AB_FLAGS" bench new new-flags --min-size 1M --max-size 16M; fi
  if [ -n "${AB_ENV:-}" ]; then (export ${AB_ENV?}; bench new new-env --min-size 1M --max-size 16M); fi
}

sanitized() {  # sanitized LABEL TIMEOUT PYTEST_ARGS...: memcheck, then racecheck, of those tests on new, without MPS
  local label=$1 limit=$2
  shift 2
  mps_off
  for tool in memcheck racecheck; do
    step "compute-sanitizer $tool ($label)"
    with new timeout "$limit" compute-sanitizer --tool "$tool" --target-processes all --error-exitcode 9 \
      python3 -m pytest -q -p no:cacheprovider "$@" >"$out/$label-$tool.out" 2>&1
    echo "$tool exit $?" | tee -a "$log"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|error" "$out/$label-$tool.out" | tail -8 | tee -a "$log"
  done
}

for stage in ${stages//,/ }; do
case $stage in
  sweep)
    MORI_LOG_LEVEL=debug bench new new-sweep ${SWEEP_SIZES:-}
    ;;
  tests)
    mps_off
    mps_on
    step test_device_proxy
    with new timeout "${TEST_TIMEOUT:-180}" python3 -m pytest -v -p no:cacheprovider "$new_dir"/tests/test_device_proxy.py \
      >"$out/test_device_proxy.out" 2>&1
    echo "exit $?" >>"$out/test_device_proxy.out"
    grep -E "::|passed|failed|^E |exit" "$out/test_device_proxy.out" | tail -30 | tee -a "$log"
    mps_off
    ;;
  base)
    bench base base ${BASE_SIZES:---min-size 1M --max-size 16M}
    mps_off
    ;;
  ab)
    bench_new
    mps_off
    ;;
  rounds)
    [ -n "$base_dir" ] || { echo "rounds: give BASE_SHMEM_DIR" | tee -a "$log"; continue; }
    for round in $(seq 1 "${ROUNDS:-3}"); do
      order="base ab"
      [ $((round % 2)) = 0 ] && order="ab base"
      for arm in $order; do
        if [ "$arm" = base ]; then bench base base --min-size 1M --max-size 16M; else bench_new; fi
      done
      mkdir -p "$out/rounds/r$round" && mv "$out"/proxy-*.json "$out/rounds/r$round/"
    done
    mps_off
    python3 ci/gpu/proxy_rounds.py "$out/rounds" | tee -a "$log"
    tar -C "$out" -czf "$out/rounds.tgz" rounds && rm -rf "$out/rounds" "$out"/proxy-*.out
    ;;
  arms)
    # $ROUNDS (2) rounds of new with each arm of $ARMS (NAME=VALUE[,NAME=VALUE...], space-separated)
    # in the PEs' environment, the order rotating, summarised as the rounds stage is.
    read -r -a arm_list <<<"${ARMS:?arms stage: set ARMS}"
    for k in "${!arm_list[@]}"; do echo "arm-$k: ${arm_list[$k]}" | tee -a "$log"; done
    for round in $(seq 1 "${ROUNDS:-2}"); do
      for i in "${!arm_list[@]}"; do
        k=$(((i + round - 1) % ${#arm_list[@]}))
        (IFS=,; for setting in ${arm_list[$k]}; do export "$setting"; done; unset IFS
          bench new "arm-$k" ${ARM_SIZES:---min-size 1M --max-size 16M})
      done
      mkdir -p "$out/arms/r$round" && mv "$out"/proxy-arm-*.json "$out/arms/r$round/"
    done
    mps_off
    python3 ci/gpu/proxy_rounds.py "$out/arms" | tee -a "$log"
    tar -C "$out" -czf "$out/arms.tgz" arms && rm -rf "$out/arms" "$out"/proxy-*.out
    ;;
  ep)
    # mori-ep compiles against the installed mori-shmem's SDK: built with the new one on the path.
    with new build packages/mori-viz viz || exit 1
    with new build packages/mori-ep ep || exit 1
    for type in ${EP_TYPES:-InterNodeV1 InterNodeV1LL InterNode AsyncLL}; do
      for arm in plain ${EP_ENV:+env}; do  # with $EP_ENV: each type again with it, right after
        name=ep-$type
        [ "$arm" = env ] && name=ep-env-$type
        step "mori-ep-bench $type ${EP_WORLD:-4} PEs${EP_ENV:+ ($arm)}"
        mps_off
        mps_on
        (
          [ "$arm" = env ] && export ${EP_ENV?}
          with new timeout "${EP_BENCH_TIMEOUT:-100}" mori-ep-bench --world-size ${EP_WORLD:-4} --max-tokens ${EP_TOKENS:-128 4096} \
            --iterations 10 --kernel-type "$type" --json "$out/$name.json" >"$out/$name.out" 2>&1
          echo "exit $?" >>"$out/$name.out"
        )
        grep -vE "^\[#" "$out/$name.out" | tail -12 | tee -a "$log"
      done
    done
    if [ "${EP_TEST_TIMEOUT:-200}" != 0 ]; then
      step "test_internode -k ${EP_TEST_K:-cuda}"
      with new timeout "${EP_TEST_TIMEOUT:-200}" python3 -m pytest -v -p no:cacheprovider packages/mori-ep/tests/test_internode.py \
        -k "${EP_TEST_K:-cuda}" -x 2>&1 | grep -E "PASSED|FAILED|ERROR|passed|failed" | tail -45 | tee -a "$log"
    fi
    mps_off
    ;;
  sanitize)
    sanitized sanitize 240 "$new_dir"/tests/test_device_proxy.py -k "put_get and all-remote"
    ;;
  sanitize-ep)
    for package in viz ep; do with new build "packages/mori-$package" "$package" || exit 1; done
    sanitized sanitize-ep "${SANITIZE_TIMEOUT:-270}" packages/mori-ep/tests/test_internode.py \
      -k "${SANITIZE_EP_K:-cuda and two_hosts_match and 2x1}"
    ;;
  pytest)
    for package in viz ep cco; do with new build "packages/mori-$package" "$package" || exit 1; done
    mps_off
    mps_on
    step "pytest ${PYTEST_ARGS:?pytest stage: set PYTEST_ARGS}"
    with new timeout "${PYTEST_TIMEOUT:-300}" python3 -m pytest -v -p no:cacheprovider $PYTEST_ARGS >"$out/pytest.out" 2>&1
    echo "exit $?" >>"$out/pytest.out"
    grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|^E |exit" "$out/pytest.out" | tail -40 | tee -a "$log"
    mps_off
    ;;
  hang)
    mps_off
    mps_on
    step "hang: 4 KiB puts ${HANG_ENV:-}"
    (if [ -n "${HANG_ENV:-}" ]; then export ${HANG_ENV?}; fi
      export PYTHONFAULTHANDLER=1 MORI_LOG_LEVEL=debug
      with new timeout $((${HANG_AFTER:-45} + 30)) mori-shmem-bench --device-proxy --min-size 4K --max-size 4K --pingpongs 20 --output "$out/proxy-hang.json" \
      >"$out/proxy-hang.out" 2>&1; echo "exit $?" >>"$out/proxy-hang.out") &
    sleep "${HANG_AFTER:-45}"
    for pid in $(pgrep -f multiprocessing.spawn); do
      timeout 25 cuda-gdb -p "$pid" -batch -ex "thread apply all bt 12" >"$out/hang-bt-$pid.txt" 2>&1
      grep -E "^Thread|mori::|cuStream|cuMemcpy|cuEvent|cuLaunch" "$out/hang-bt-$pid.txt" | grep -v execute_native |
        tee -a "$log" | tail -40
    done
    pkill -ABRT -f multiprocessing.spawn 2>/dev/null
    wait
    grep -vE "^\[#|DEBUG" "$out/proxy-hang.out" | tail -30 | tee -a "$log"
    mps_off
    ;;
  doorbell)
    mps_off
    step "doorbell: host-to-kernel round trips, no MPS"
    timeout 120 python3 ci/gpu/doorbell_probe.py --rounds 3000 2>&1 | tee -a "$log"
    mps_on
    step "doorbell: under MPS, alone"
    timeout 120 python3 ci/gpu/doorbell_probe.py --rounds 3000 2>&1 | tee -a "$log"
    step "doorbell: under MPS, two processes at once (as two PEs)"
    timeout 120 python3 ci/gpu/doorbell_probe.py --rounds 3000 >"$out/doorbell-pair-0.txt" 2>&1 &
    timeout 120 python3 ci/gpu/doorbell_probe.py --rounds 3000 >"$out/doorbell-pair-1.txt" 2>&1
    wait
    cat "$out/doorbell-pair-0.txt" "$out/doorbell-pair-1.txt" | tee -a "$log"
    mps_off
    ;;
  *) echo "unknown stage $stage" | tee -a "$log" ;;
esac
done
step done
if [ -n "${PACK:-}" ]; then
  tar -C "$(dirname "$out")" -czf "$out.tgz" "$(basename "$out")" && rm -rf "$out"
fi
