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
from mori.ep.errors import EpPeerLostError, EpTimeoutError
from mori.ep.kernels import combine_spec, dispatch_spec, net_spec
from mori.ep.layout import DTYPE_CODES, EpArgs

logger = logging.getLogger("mori.ep")

# mori_ep_net_wait's second argument (ep_net.cu MORI_EP_NET_WAIT_*).
_WAIT_BATCHES, _WAIT_REPLIES, _WAIT_ACKS = 0, 1, 2
# The kernels of each module (ep_dispatch.cu, ep_combine.cu, ep_net.cu).
_DISPATCH: tuple[str, ...] = ("mori_ep_dispatch",)
_COMBINE: tuple[str, ...] = ("mori_ep_combine_stage", "mori_ep_combine")
_NET: tuple[str, ...] = ("mori_ep_net_pack", "mori_ep_net_send", "mori_ep_net_wait")


def _native(call: Any, *args: Any) -> None:
    """One call of the cpu backend, its native failures as mori.ep errors."""
    try:
        call(*args)
    except _C.WaitTimeout as exc:
        raise EpTimeoutError(str(exc)) from None
    except _C.PeerFailure as exc:
        raise EpPeerLostError(str(exc)) from None


class CpuBackend:
    """Runs dispatch/combine in the calling thread (the GIL is released meanwhile). The geometry
    arguments of the kernels do not apply to one host thread."""

    name = "cpu"

    def dispatch(self, args: EpArgs, *, low_latency: bool, grid: int, block: int) -> None:
        _native(_C.dispatch, ctypes.addressof(args))

    def combine(self, args: EpArgs, *, dtype: str, quant: int, grid: int, block: int, stage_grid: int) -> None:
        _native(_C.combine, ctypes.addressof(args), DTYPE_CODES[dtype], quant)

    def net_dispatch_send(self, args: EpArgs, *, grid: int, block: int, send_blocks: int) -> None:
        _native(_C.net_dispatch_send, ctypes.addressof(args))

    def net_dispatch_recv(self, args: EpArgs, *, low_latency: bool, grid: int, block: int) -> None:
        _native(_C.net_dispatch_recv, ctypes.addressof(args))

    def net_combine_send(
        self, args: EpArgs, *, dtype: str, quant: int, grid: int, block: int, stage_grid: int, send_blocks: int
    ) -> None:
        _native(_C.net_combine_send, ctypes.addressof(args), DTYPE_CODES[dtype], quant)

    def net_combine_recv(self, args: EpArgs, *, dtype: str, quant: int, grid: int, block: int) -> None:
        _native(_C.net_combine_recv, ctypes.addressof(args), DTYPE_CODES[dtype])

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
        """("dispatch", low_latency, net), ("combine", dtype, quant, net) or ("net",), loaded with
        every kernel it has (CUDA may otherwise load a kernel at its first lookup)."""
        module = self._modules.get(key)
        if module is None:
            if key[0] == "dispatch":
                spec, net, names = dispatch_spec(self.world_size, self.topk, key[1], key[2]), key[2], _DISPATCH
            elif key[0] == "combine":
                spec, net = combine_spec(self.world_size, self.topk, key[1], key[2], key[3]), False
                names = _COMBINE + (("mori_ep_net_sum",) if key[3] else ())
            else:
                spec, net, names = net_spec(self.world_size, self.topk), True, _NET
            logger.debug("loading %s", spec.name)
            module = spec.load(device=self.device)
            for name in names:
                module.function(name)
            if net:  # its kernels call mori-shmem's device API through the module global
                import mori.shmem

                mori.shmem.shmem_module_init(module)
            self._modules[key] = module
        return module

    def prepare_net(self, *, low_latency: bool, combine_dtypes: tuple[str, ...], quant: int) -> None:
        """Loads every module an inter-node op launches, before its first launch: a module load
        waits for this process's running kernels and holds back the device proxy's work meanwhile,
        so a load behind a queued network wait would stall it to its timeout (mori.shmem.proxy_hazards)."""
        self._module(("net",))
        self._module(("dispatch", low_latency, True))
        for dtype in combine_dtypes:
            self.load_combine(dtype, quant)

    def load_combine(self, dtype: str, quant: int) -> Any:
        """The inter-node combine module of rows of dtype and wire format quant (loaded if need be)."""
        return self._module(("combine", dtype, quant, True))

    def has_combine(self, dtype: str, quant: int) -> bool:
        return ("combine", dtype, quant, True) in self._modules

    @staticmethod
    def _stream() -> Any:
        import torch

        return torch.cuda.current_stream()

    def dispatch(self, args: EpArgs, *, low_latency: bool, grid: int, block: int) -> None:
        kernel = self._module(("dispatch", low_latency, False)).function("mori_ep_dispatch")
        kernel.launch(grid, block, [args], stream=self._stream())

    def combine(self, args: EpArgs, *, dtype: str, quant: int, grid: int, block: int, stage_grid: int) -> None:
        module = self._module(("combine", dtype, quant, False))
        stream = self._stream()
        module.function("mori_ep_combine_stage").launch(stage_grid, block, [args], stream=stream)
        module.function("mori_ep_combine").launch(grid, block, [args], stream=stream)

    # The inter-node kernel types: the protocol of src/cpu/net.cpp, one launch per step.

    def _wait(self, args: EpArgs, what: int) -> None:
        """One block waits for every node's batches (0), replies (1) or acknowledgements (2), so that
        no full grid spins on the network (ep_net.cu says why)."""
        self._module(("net",)).function("mori_ep_net_wait").launch(
            1, 128, [args, ctypes.c_int32(what)], stream=self._stream()
        )

    def _send(self, args: EpArgs, replies: bool, blocks: int, block: int) -> None:
        """``blocks`` (the call's rdma_block_num, else its block_num) share out the batches' bytes."""
        nodes = self.world_size // args.group
        slices = max(1, blocks // nodes)
        self._module(("net",)).function("mori_ep_net_send").launch(
            nodes * slices, block, [args, ctypes.c_int32(int(replies))], stream=self._stream()
        )

    def _hop_rows(self, args: EpArgs) -> EpArgs:
        """args for a launch over the hop buffer's rows, [nodes][max_tokens]."""
        hop = EpArgs.from_buffer_copy(args)
        hop.num_tokens = self.world_size // args.group * args.max_tokens
        return hop

    def net_dispatch_send(self, args: EpArgs, *, grid: int, block: int, send_blocks: int) -> None:
        self._module(("net",)).function("mori_ep_net_pack").launch(grid, block, [args], stream=self._stream())
        self._wait(args, _WAIT_ACKS)
        self._send(args, False, send_blocks, block)

    def net_dispatch_recv(self, args: EpArgs, *, low_latency: bool, grid: int, block: int) -> None:
        self._wait(args, _WAIT_BATCHES)
        kernel = self._module(("dispatch", low_latency, True)).function("mori_ep_dispatch")
        kernel.launch(grid, block, [self._hop_rows(args)], stream=self._stream())

    def net_combine_send(
        self, args: EpArgs, *, dtype: str, quant: int, grid: int, block: int, stage_grid: int, send_blocks: int
    ) -> None:
        module = self.load_combine(dtype, quant)
        stream = self._stream()
        module.function("mori_ep_combine_stage").launch(stage_grid, block, [args], stream=stream)
        module.function("mori_ep_combine").launch(grid, block, [self._hop_rows(args)], stream=stream)
        self._send(args, True, send_blocks, block)

    def net_combine_recv(self, args: EpArgs, *, dtype: str, quant: int, grid: int, block: int) -> None:
        self._wait(args, _WAIT_REPLIES)
        module = self.load_combine(dtype, quant)
        module.function("mori_ep_net_sum").launch(grid, block, [args], stream=self._stream())

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()
