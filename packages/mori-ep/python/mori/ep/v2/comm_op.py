# SPDX-License-Identifier: MIT
"""mori.ep's v1 op over a mori.cco communicator's memory instead of mori.shmem's heap.

The v1 protocol (src/cpu, src/device: ep_dispatch.cu, ep_combine.cu) of the intranode kernel
types only loads and stores the PEs' regions through the addresses in ``EpArgs.peer_regions``,
so it runs unchanged over any symmetric memory whose peers' copies this process maps. This
subclass builds exactly the state ``mori.ep.EpDispatchCombineOp.__init__`` builds for an
intranode op, with the region, the peer addresses, the backend and the opening barrier taken from
the communicator; every call then runs v1's own code. test_v2_comm.py checks that both
constructors leave the same attributes, so a new one in v1 cannot go unnoticed here.
"""

from __future__ import annotations

import logging
from typing import Any

from mori.ep.config import EpDispatchCombineConfig as V1Config
from mori.ep.errors import EpUnsupportedError
from mori.ep.layout import Layout
from mori.ep.op import EpDispatchCombineOp as V1Op
from mori.ep.routing import new_op_id
from mori.ep.settings import setting
from mori.ep.v2.memory import Block, SymmetricMemory

logger = logging.getLogger("mori.ep.v2")


class CommV1Op(V1Op):
    """A v1 intranode op whose region is a block of ``memory`` (collective to create and close)."""

    def __init__(self, config: V1Config, memory: SymmetricMemory) -> None:
        import torch

        if config.routing_group:
            raise EpUnsupportedError(
                f"kernel_type={config.kernel_type.name}: a communicator carries intranode ops only"
            )
        self.config = config
        self._torch = torch
        self.layout = Layout.for_config(config)
        self.device = memory.device
        self._bind_backend(memory.cuda_device if memory.backend == "cuda" else None)
        logger.debug("op region over the communicator: %d bytes", self.layout.nbytes)
        block: Block = memory.allocate(self.layout.nbytes)  # collective
        self._buffer = block  # type: ignore[assignment]  # V1Op uses only free(), which Block has
        self._region = block.local()
        self._region[: self.layout.offsets["off_disp_tokens"]].zero_()  # control words; buffers need no zeros
        self._peer_regions = torch.tensor(
            [block.peer_ptr(pe) for pe in range(config.world_size)], dtype=torch.int64, device=self.device
        )
        timeout_ns = int(setting("MORI_EP_TIMEOUT") * 1e9)
        self._base = self.layout.base_args(config, block.ptr, self._peer_regions.data_ptr(), timeout_ns)
        self._trace: Any = None  # the kernels' mori-viz trace is wired for mori.shmem ops only
        self.local_expert_count = torch.zeros(config.num_experts_per_rank, dtype=torch.int32, device=self.device)
        self._dispatched_tokens: int | None = None
        self._combined_since_dispatch = False
        self._pending_dispatch = None
        self._pending_combine = None
        self._pending_routing = None
        self._id = new_op_id()  # v1's routing handles carry it
        self._closed = False
        self._moe_layout = None
        self._backend.synchronize()
        memory.barrier()  # every PE's control words are zero before any peer writes them
