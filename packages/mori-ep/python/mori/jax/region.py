# SPDX-License-Identifier: MIT
"""The symmetric region of a mori.jax op and what its FFI handler needs to run on it, set up
without torch: the same checks, layout and base arguments as ``mori.ep.EpDispatchCombineOp``, so
the handler runs the very protocol of the torch path on the same buffers."""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

import mori.shmem as shmem
from mori.ep.config import (
    INTRA_NODE_KERNEL_TYPES,
    LOW_LATENCY_KERNEL_TYPES,
    EpDispatchCombineConfig,
    EpDispatchCombineQuantType,
)
from mori.ep.errors import EpUnsupportedError
from mori.ep.inputs import COMBINE_DTYPES
from mori.ep.layout import CTRL_ERROR, DTYPE_CODES, EpArgs, Layout
from mori.ep.op import EpDispatchCombineOp
from mori.ep.settings import setting
from mori.shmem.errors import HeapExhaustedError

logger = logging.getLogger("mori.jax")

_MAX_DTYPE = 8  # ep_ffi.cpp kMaxDtype


class OpSpec(ctypes.Structure):
    """ep_ffi.cpp's OpSpec, field for field."""

    _fields_ = [
        ("on_cuda", ctypes.c_int32),
        ("inter_node", ctypes.c_int32),
        ("quant", ctypes.c_int32),
        ("pad_", ctypes.c_int32),
        ("cpu_run", ctypes.c_uint64),
        ("dispatch_kernel", ctypes.c_uint64),
        ("combine_stage", ctypes.c_uint64 * _MAX_DTYPE),
        ("combine_kernel", ctypes.c_uint64 * _MAX_DTYPE),
    ]


def cpu_entry_point() -> int:
    """Address of mori.ep._C's ``mori_ep_cpu_run`` (src/c_abi.cpp)."""
    from mori.ep import _C

    function = ctypes.CDLL(_C.__file__).mori_ep_cpu_run  # dlopen of a loaded library: the same copy
    address = ctypes.cast(function, ctypes.c_void_p).value
    assert address is not None
    return address


@dataclass
class Region:
    """An op's region (collective to create and to free) and its registered description."""

    config: EpDispatchCombineConfig
    layout: Layout
    buffer: Any
    peer_table: Any  # keeps the peer-address table alive (numpy on the cpu backend, a heap buffer on cuda)
    base: EpArgs
    spec: OpSpec
    on_cuda: bool
    device: int
    arch: str
    gpu: str

    @classmethod
    def create(cls, config: EpDispatchCombineConfig) -> Region:
        # mori.ep's op combines fp4_blockwise; the JAX handlers do not pass its wire format yet.
        if config.quant == EpDispatchCombineQuantType.Fp4BlockwiseQuant:
            raise EpUnsupportedError(
                "quant_type='fp4_blockwise' is not supported through mori.jax yet; use fp8_blockwise"
            )
        EpDispatchCombineOp.check_creation(config, "call mori.jax.shmem_init_attr (or mori.shmem's) first")
        on_cuda = shmem.shmem_backend() == "cuda"
        if on_cuda and config.kernel_type not in INTRA_NODE_KERNEL_TYPES:
            raise EpUnsupportedError(
                f"mori.jax runs kernel_type={config.kernel_type.name} on the cpu backend only; on the GPU it "
                f"runs {', '.join(k.name for k in INTRA_NODE_KERNEL_TYPES)}"
            )
        layout = Layout.for_config(config)
        try:
            buffer = shmem.shmem_empty(layout.nbytes, "uint8")  # collective
        except HeapExhaustedError as exc:
            raise HeapExhaustedError(
                f"the op needs {layout.nbytes} bytes of symmetric heap ({exc}); raise MORI_SHMEM_HEAP_SIZE"
            ) from exc
        peers = np.array([buffer.peer(pe).ptr for pe in range(config.world_size)], dtype=np.int64)
        control = layout.offsets["off_disp_tokens"]  # control words must start zeroed; buffers need no zeros
        timeout_ns = int(setting("MORI_EP_TIMEOUT") * 1e9)
        spec = OpSpec(on_cuda=int(on_cuda), inter_node=int(layout.group > 0), quant=int(config.quant))
        device, arch, gpu = -1, "", ""
        if on_cuda:
            from mori.ep.launch_config import gpu_model_name
            from mori.shmem.jit import driver

            device = shmem.shmem_cuda_device()
            driver.ensure_context(device)
            arch = driver.device_arch(device).replace("_", "")
            gpu = gpu_model_name(driver.device_name(device))
            peer_table: Any = shmem.shmem_empty(config.world_size * 8, "uint8")  # collective
            driver.memcpy_htod(peer_table.ptr, peers.tobytes())
            driver.memcpy_htod(buffer.ptr, bytes(control))
            base = layout.base_args(config, buffer.ptr, peer_table.ptr, timeout_ns)
            _load_kernels(spec, config, device)
            driver.context_synchronize()
        else:
            peer_table = peers
            ctypes.memset(buffer.ptr, 0, control)
            base = layout.base_args(config, buffer.ptr, peers.ctypes.data, timeout_ns)
            spec.cpu_run = cpu_entry_point()
        shmem.shmem_barrier_all()  # every PE's control words are zero before any peer writes them
        return cls(config, layout, buffer, peer_table, base, spec, on_cuda, device, arch, gpu)

    def error_word(self) -> int:
        """Reads and clears the op's error word (a device sync on the cuda backend)."""
        if not self.on_cuda:
            word = ctypes.c_uint32.from_address(self.buffer.ptr + CTRL_ERROR)
            code, word.value = int(word.value), 0
            return code
        from mori.shmem.jit import driver

        driver.context_synchronize()
        code = int(np.frombuffer(driver.memcpy_dtoh(self.buffer.ptr + CTRL_ERROR, 4), dtype=np.uint32)[0])
        if code:
            driver.memcpy_htod(self.buffer.ptr + CTRL_ERROR, bytes(4))
        return code

    def free(self) -> None:
        """Collective."""
        if self.on_cuda:
            from mori.shmem.jit import driver

            driver.context_synchronize()
            self.peer_table.free()
        self.buffer.free()


def _load_kernels(spec: OpSpec, config: EpDispatchCombineConfig, device: int) -> None:
    """The kernels of the op's calls, loaded up front (a module load waits for running kernels):
    dispatch, and combine for every dtype the config's wire format takes."""
    from mori.ep.backends import CudaBackend

    backend = CudaBackend(config.world_size, config.num_experts_per_token, device)
    low_latency = config.kernel_type in LOW_LATENCY_KERNEL_TYPES
    spec.dispatch_kernel = backend._module(("dispatch", low_latency, False)).function("mori_ep_dispatch").handle
    for dtype in combine_dtypes(config):
        module = backend._module(("combine", dtype, int(config.quant), False))
        spec.combine_stage[DTYPE_CODES[dtype]] = module.function("mori_ep_combine_stage").handle
        spec.combine_kernel[DTYPE_CODES[dtype]] = module.function("mori_ep_combine").handle


def combine_dtypes(config: EpDispatchCombineConfig) -> tuple[str, ...]:
    """What combine takes from mori.jax: bf16 with a quantised wire format, else bf16, fp16, fp32."""
    return ("bfloat16",) if int(config.quant) else COMBINE_DTYPES
