# SPDX-License-Identifier: MIT
"""The two ways an op runs its protocol: host code on the cpu backend, kernels on the cuda one.

Both take the same ``EpArgs`` and act on the same region layout; which one an op uses follows
mori-shmem's backend (``shmem_backend()``).
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

from mori.ep import _C
from mori.ep.errors import EpTimeoutError
from mori.ep.kernels import combine_spec, dispatch_spec
from mori.ep.layout import DTYPE_CODES, EpArgs

logger = logging.getLogger("mori.ep")


class CpuBackend:
    """Runs dispatch/combine in the calling thread (the GIL is released meanwhile)."""

    name = "cpu"

    def dispatch(self, args: EpArgs, *, low_latency: bool, grid: int, block: int) -> None:
        del low_latency, grid, block  # one host thread: the geometry of the kernels does not apply
        try:
            _C.dispatch(ctypes.addressof(args))
        except _C.WaitTimeout as exc:
            raise EpTimeoutError(str(exc)) from None

    def combine(self, args: EpArgs, *, dtype: str, quant: int, grid: int, block: int, stage_grid: int) -> None:
        del grid, block, stage_grid
        try:
            _C.combine(ctypes.addressof(args), DTYPE_CODES[dtype], quant)
        except _C.WaitTimeout as exc:
            raise EpTimeoutError(str(exc)) from None

    def synchronize(self) -> None:
        pass


class CudaBackend:
    """Launches the JIT-compiled kernels on the current torch stream; no host sync anywhere, so
    dispatch and combine can be captured in a CUDA graph."""

    name = "cuda"

    def __init__(self, world_size: int, topk: int, device: int) -> None:
        self.world_size = world_size
        self.topk = topk
        self.device = device
        self._modules: dict[tuple[Any, ...], Any] = {}

    def _module(self, key: tuple[Any, ...]) -> Any:
        module = self._modules.get(key)
        if module is None:
            if key[0] == "dispatch":
                spec = dispatch_spec(self.world_size, self.topk, key[1])
            else:
                spec = combine_spec(self.world_size, self.topk, key[1], key[2])
            logger.debug("loading %s", spec.name)
            module = spec.load(device=self.device)
            self._modules[key] = module
        return module

    @staticmethod
    def _stream() -> Any:
        import torch

        return torch.cuda.current_stream()

    def dispatch(self, args: EpArgs, *, low_latency: bool, grid: int, block: int) -> None:
        kernel = self._module(("dispatch", low_latency)).function("mori_ep_dispatch")
        kernel.launch(grid, block, [args], stream=self._stream())

    def combine(self, args: EpArgs, *, dtype: str, quant: int, grid: int, block: int, stage_grid: int) -> None:
        module = self._module(("combine", dtype, quant))
        stream = self._stream()
        module.function("mori_ep_combine_stage").launch(stage_grid, block, [args], stream=stream)
        module.function("mori_ep_combine").launch(grid, block, [args], stream=stream)

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()
