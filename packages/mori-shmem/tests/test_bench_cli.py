# SPDX-License-Identifier: MIT
"""mori-shmem-bench's argument handling that needs no measurement."""

from __future__ import annotations

import pytest

from mori.shmem import bench
from mori.shmem.device import shmem_cuda_available


@pytest.mark.skipif(shmem_cuda_available(), reason="with a GPU the command would run the benchmark")
def test_device_proxy_without_a_gpu_says_why():
    with pytest.raises(SystemExit, match="--device-proxy needs a GPU"):
        bench.main(["--device-proxy"])


def test_device_proxy_measures_two_pes():
    with pytest.raises(SystemExit, match="--device-proxy measures 2 PEs"):
        bench.main(["--device-proxy", "--pes", "4"])
