# SPDX-License-Identifier: MIT
# Source this on the GPU machine (docs/developer-guide/gpu.md): it builds mori-shmem from this tree
# with that machine's Python (it has no meson-python or nox, so .whl/ carries them), installs it
# into a scratch directory on PYTHONPATH, and starts the CUDA MPS daemon so several PEs share the
# GPU; the daemon is stopped when the shell exits.
#   source ci/gpu/setup.sh && python3 -m pytest packages/mori-shmem/tests -m gpu
set -eo pipefail
_mori_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
_mori_build_site=/tmp/mori-build-site
_mori_site=/tmp/mori-site

python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$_mori_build_site" "$_mori_root"/.whl/*.whl
export PYTHONPATH="$_mori_build_site${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$_mori_build_site/bin:$PATH"
rm -rf /tmp/mori-wheels "$_mori_site"
# One at a time, installed before the next builds: dependents (mori-ep) ask the installed
# mori-shmem for its SDK at configure time. One target directory per package, because pip
# --target replaces a top-level directory (`mori`) that is already there; the `mori` namespace
# spans them all on PYTHONPATH.
# The root package `mori` (mori/__init__.py, shared helpers) comes first: every wheel needs it.
for pkg in root ${MORI_GPU_PACKAGES:-shmem}; do
  if [ "$pkg" = root ]; then src="$_mori_root/packages/mori" wheel=mori-*.whl; else src="$_mori_root/packages/mori-$pkg" wheel=mori_"$pkg"-*.whl; fi
  python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/mori-wheels "$src"
  python3 -m pip install -q --no-deps --no-compile --target "$_mori_site/$pkg" /tmp/mori-wheels/$wheel
  export PYTHONPATH="$_mori_site/$pkg:$PYTHONPATH"
  export PATH="$_mori_site/$pkg/bin:$PATH"
done
export PYTHONUNBUFFERED=1

export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
trap 'echo quit | nvidia-cuda-mps-control' EXIT
set +e
