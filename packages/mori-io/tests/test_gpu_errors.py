# SPDX-License-Identifier: MIT
"""GPU requests on a machine that cannot serve them fail with typed errors naming why (these run
everywhere; on a GPU machine the no-GPU cases skip and test_gpu.py covers the rest)."""

from __future__ import annotations

import numpy as np
import pytest

import mori.io as mio
from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryLocationType, XgmiBackendConfig
from mori.io._native import _C

NO_GPU = _C.gpu_unavailable_reason()
needs_no_gpu = pytest.mark.skipif(not NO_GPU, reason="this machine has a usable GPU; test_gpu.py covers it")


class FakeCudaTensor:
    """Duck-types the few torch.Tensor members register_torch_tensor reads (torch may be absent)."""

    class device:  # mirrors torch.device's attribute names
        type = "cuda"
        index = 0

    def is_contiguous(self):
        return True

    def data_ptr(self):
        return 0x7000

    def nelement(self):
        return 16

    def element_size(self):
        return 4


@needs_no_gpu
def test_gpu_memory_without_a_gpu_is_unsupported_naming_why():
    with IOEngine("g", IOEngineConfig()) as e:
        with pytest.raises(mio.UnsupportedError, match="GPU memory needs") as info:
            e.register_memory(0x1000, 4096, 0, MemoryLocationType.GPU)
        assert NO_GPU.split(": ", 1)[-1] in str(info.value)  # the loader's own reason, e.g. dlopen's
        with pytest.raises(mio.UnsupportedError, match="GPU memory needs"):
            e.register_torch_tensor(FakeCudaTensor())
        ok = e.register_memory(np.zeros(8, np.uint8).ctypes.data, 8, -1, MemoryLocationType.CPU)
        e.deregister_memory(ok)
    assert issubclass(mio.UnsupportedError, NotImplementedError)


@needs_no_gpu
def test_p2p_backend_without_a_gpu_is_unsupported_naming_why():
    with IOEngine("x", IOEngineConfig()) as e:
        with pytest.raises(mio.UnsupportedError, match=r"type=XGMI .*GPU memory needs"):
            e.create_backend(BackendType.XGMI)
        assert "XGMI" not in repr(e)  # not half-created
        e.create_backend(BackendType.TCP)  # the other backend still works


def test_xgmi_config_is_checked_before_the_driver():
    with IOEngine("c", IOEngineConfig()) as e:
        with pytest.raises(mio.InvalidArgumentError, match=r"num_streams=0 is out of range \[1, 1024\]"):
            e.create_backend(BackendType.XGMI, XgmiBackendConfig(num_streams=0))
        with pytest.raises(mio.InvalidArgumentError, match=r"num_events=-1 is out of range"):
            e.create_backend(BackendType.XGMI, XgmiBackendConfig(num_events=-1))
        with pytest.raises(mio.InvalidArgumentError, match=r"run_kernel='no' must be a bool"):
            e.create_backend(BackendType.XGMI, XgmiBackendConfig(run_kernel="no"))  # type: ignore[arg-type]
        with pytest.raises(mio.InvalidArgumentError, match=r"resident_blocks=-1 is out of range \[0, 1024\]"):
            e.create_backend(BackendType.XGMI, XgmiBackendConfig(resident_blocks=-1))
        with pytest.raises(mio.InvalidArgumentError, match=r"resident_idle_us=0 is out of range"):
            e.create_backend(BackendType.XGMI, XgmiBackendConfig(resident_idle_us=0))
        with pytest.raises(mio.InvalidArgumentError, match="XgmiBackendConfig"):
            e.create_backend(BackendType.XGMI, mio.TcpBackendConfig())


def test_device_id_below_minus_one_is_invalid():
    with IOEngine("d", IOEngineConfig()) as e, pytest.raises(mio.InvalidArgumentError, match=r"device_id=-2"):
        e.register_memory(0x1000, 4096, -2, MemoryLocationType.GPU)


def test_gpu_bench_without_a_gpu_exits_with_the_reason(capsys):
    from mori.io.bench import cli

    if not NO_GPU:
        pytest.skip("this machine has a usable GPU")
    assert cli.main(["--backend", "p2p", "--max_block_size", "4096"]) == 2
    assert "GPU segments need a GPU" in capsys.readouterr().err
