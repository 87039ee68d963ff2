# SPDX-License-Identifier: MIT
"""MORI's v2 ``EpDispatchCombineOp`` on mori.ep's backends.

The op is a thin layer over a v1 ``mori.ep.EpDispatchCombineOp``, which moves the data on the cpu
or cuda backend: v2 adds MORI's v2 config, its call contract (``combine`` needs the routing
handle of a dispatch; ``weights`` there only asks for the weight sum), its checks and its
lifecycle. The data contract is v1's, so the two APIs give the same results on the same inputs.

The symmetric memory comes from ``comm`` (a ``mori.cco.Communicator``, as in MORI) or, with
``comm=None``, from mori.shmem's heap. ``combine_mode="scatter"`` (and every quant type, which
MORI runs as scatter) combines by pushing rows to their source PEs (:mod:`mori.ep.v2.scatter`).
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

from mori.ep.errors import EpConfigError, EpInputError, EpUnsupportedError
from mori.ep.op import EpDispatchCombineOp as V1Op
from mori.ep.routing import check_made_for
from mori.ep.v2 import geometry
from mori.ep.v2.compat import note_inert_settings
from mori.ep.v2.config import NATIVE_BACKEND, EpDispatchCombineConfig, dtype_name, unsupported
from mori.ep.v2.errors import EpOpClosedError, EpRoutingError
from mori.ep.v2.memory import CcoMemory, ShmemMemory, SymmetricMemory
from mori.ep.v2.routing import Encoding, EpDispatchRoutingHandle
from mori.ep.v2.scatter import ScatterCombine, inbox_bytes

logger = logging.getLogger("mori.ep.v2")

CAPABILITIES = frozenset(
    {"gather", "scatter", "quant", "scales", "replay", "local_expert_count", "asymmetric_dtype", "recv_cap"}
)
_OP_IDS = itertools.count(1)


class EpDispatchCombineOp:
    """One v2 dispatch/combine operator over ``cfg.world_size`` PEs (collective to create and to
    close).

    ``comm``: a ``mori.cco.Communicator`` of ``cfg.world_size`` ranks on one node with this
    process as ``cfg.rank`` (MORI's argument); the op's symmetric memory and barriers are the
    communicator's, and mori.shmem need not be initialised. ``None``: mori.shmem must be
    initialised with this process as ``cfg.rank``. Tensors live where the memory's backend runs
    (CPU tensors on the cpu backend, the communicator's or ``shmem_cuda_device()``'s GPU on cuda).
    """

    def __init__(self, cfg: EpDispatchCombineConfig, comm: Any = None) -> None:
        if not isinstance(cfg, EpDispatchCombineConfig):
            raise EpConfigError(
                f"cfg must be a mori.ep.v2.EpDispatchCombineConfig, got {type(cfg).__module__}.{type(cfg).__name__}"
            )
        reason = unsupported(cfg)
        if reason is not None:
            raise EpUnsupportedError(reason)  # before anything is allocated, as MORI's capability gate
        self.cfg = self.config = cfg
        self.comm = comm
        self._id = next(_OP_IDS)
        memory: SymmetricMemory
        if comm is None:
            self._v1 = V1Op(cfg.to_v1_config())  # collective; checks mori.shmem is initialised
            memory = ShmemMemory()
        else:
            from mori.ep.v2.comm_op import CommV1Op

            memory = CcoMemory(comm, cfg.rank, cfg.world_size)  # checks comm before allocating
            self._v1 = CommV1Op(cfg.to_v1_config(), memory)  # collective
        self.device = self._v1.device
        note_inert_settings(cfg, self.device.type)
        self._encoding = Encoding(cfg.world_size, cfg.max_num_inp_token_per_rank, self._v1.max_num_tokens_to_recv())
        self._scatter: ScatterCombine | None = None
        if cfg.is_scatter:
            try:
                self._scatter = ScatterCombine(cfg, memory, self._encoding.max_recv)  # collective
            except BaseException:
                self._v1.close()
                raise
        self._last: tuple[Any, ...] | None = None  # the latest dispatch's outputs (views of the region)
        self._closed = False
        logger.debug("%r", self)

    # ---- MORI's class-level API ------------------------------------------------------------

    @classmethod
    def available_backends(cls) -> tuple[str, ...]:
        """Kernel backends this build runs (MORI's are 'flydsl' and 'hip')."""
        return (NATIVE_BACKEND,)

    @property
    def capabilities(self) -> frozenset[str]:
        return CAPABILITIES

    @property
    def closed(self) -> bool:
        return self._closed

    def max_num_tokens_to_recv(self) -> int:
        return self._encoding.max_recv

    @staticmethod
    def required_heap_bytes(cfg: EpDispatchCombineConfig) -> int:
        """Symmetric bytes an op of ``cfg`` takes (MORI_SHMEM_HEAP_SIZE, or the communicator's
        per_rank_vmm, must leave room for them): the v1 region, plus the scatter inboxes."""
        return V1Op.required_heap_bytes(cfg.to_v1_config()) + (inbox_bytes(cfg) if cfg.is_scatter else 0)

    def check_error(self) -> None:
        """Raises what the kernels recorded since the last check (EpTimeoutError, EpOverflowError,
        EpInputError), as v1's ``check_error``: a device sync on the cuda backend, where errors are
        not raised by the calls themselves; the cpu backend raises them at once."""
        self._check_open("check_error")
        self._v1.check_error()

    # ---- dispatch ------------------------------------------------------------------------

    def dispatch(
        self,
        input: Any,
        weights: Any,
        scales: Any,
        indices: Any,
        *,
        routing: EpDispatchRoutingHandle | None = None,
        return_routing: bool = False,
    ) -> tuple[Any, ...]:
        """Sends each row of ``input`` [n, hidden_dim] (``dispatch_data_type``) once to every PE
        owning one of its experts (``indices`` [n, K] int32, -1 = none; ``weights`` [n, K] f32 or
        None; ``scales`` [n, <= scale_dim] or None). Returns ``(out [R, H], out_weights [R, K],
        out_scales | None, out_indices [R, K], total_recv [1])``, views of the op's receive buffers
        whose rows ``[:total_recv]`` are valid, plus the routing handle when ``return_routing``
        (combine needs it). ``routing=h`` sends the rows to the slots of the dispatch ``h`` came
        from (every PE replays its handle of that dispatch)."""
        self._check_open("dispatch")
        cfg = self.cfg
        if routing is not None and return_routing:
            raise EpInputError("pass either routing= (a replay) or return_routing=True, not both")
        self._check_tokens(
            "input", input, cfg.dispatch_dtype, cfg.max_num_inp_token_per_rank, "max_num_inp_token_per_rank"
        )
        tokens = int(input.shape[0])
        v1_routing = None
        if routing is not None:
            v1_routing = self._v1_routing("routing", routing, tokens)
        launch = geometry.for_tokens(cfg, tokens)
        outputs = self._v1.dispatch(
            input,
            weights,
            scales,
            indices,
            launch.dispatch_blocks,
            -1,
            launch.dispatch_warps,
            routing=v1_routing,
            return_routing=return_routing,
        )
        self._last = outputs[:5]
        if not return_routing:
            return tuple(outputs)
        return (*outputs[:5], self._encoding.from_v1(outputs[5], self._id))

    # ---- combine -------------------------------------------------------------------------

    def combine(
        self,
        input: Any,
        weights: Any = None,
        indices: Any = None,
        *,
        routing: EpDispatchRoutingHandle | None = None,
    ) -> tuple[Any, Any]:
        """Returns ``(out [n, H], out_weights [n, K] | None)`` for the n tokens of the dispatch
        ``routing`` came from: row t sums, over the distinct PEs token t went to, the row of
        ``input`` ([>= total_recv, H], ``combine_data_type``) each of them holds for it.
        ``routing`` is required. ``weights`` only asks for ``out_weights``, summed the same way
        from the weights the latest dispatch delivered (its values are not read); ``indices`` is
        accepted for MORI's signature and not used."""
        del indices  # MORI's v2 ignores it too: the routing handle carries the layout
        self._check_open("combine")
        if routing is None:
            raise EpRoutingError(
                "combine needs routing=: the EpDispatchRoutingHandle of a dispatch(..., return_routing=True)"
            )
        if self._last is None:
            raise EpInputError("combine was called before any dispatch of this op")
        tokens = routing.cur_rank_num_token if isinstance(routing, EpDispatchRoutingHandle) else 0
        v1_routing = self._v1_routing("routing", routing, tokens)
        self._check_tokens("input", input, self.cfg.combine_dtype, self._encoding.max_recv, "max_num_tokens_to_recv()")
        if self._scatter is not None:
            if input.device != self.device:
                raise EpInputError(f"input is on {input.device}; this op runs on {self.device}")
            return self._scatter(input, self._last[1], routing, want_weights=weights is not None)
        fold = None
        if weights is not None:
            fold = self._last[1][: int(input.shape[0])]  # the delivered weights, as MORI's out_wts
        launch = geometry.for_tokens(self.cfg, tokens)
        out, out_weights = self._v1.combine(
            input,
            fold,
            v1_routing.disp_dest_tok_id_map,  # v1 checks an [n, K] int32 routing here and reads the handle's
            launch.combine_blocks,
            -1,
            launch.combine_warps,
            routing=v1_routing,
        )
        return out[:tokens], None if out_weights is None else out_weights[:tokens]

    # ---- checks --------------------------------------------------------------------------

    def _check_open(self, call: str) -> None:
        if self._closed:
            raise EpOpClosedError(f"{call}() on a closed op (rank {self.cfg.rank}): create a new op")

    def _check_tokens(self, name: str, value: Any, dtype: Any, limit: int, limit_name: str) -> None:
        """v2's stricter checks of a token tensor (one dtype, the full hidden size); v1 checks the
        rest (device, contiguity, alignment) before launching."""
        if not (hasattr(value, "dtype") and hasattr(value, "shape") and hasattr(value, "dim")):
            raise EpInputError(f"{name} must be a torch tensor, got {type(value).__name__}")
        if value.dtype != dtype:
            raise EpInputError(f"{name}.dtype={value.dtype}; this op was configured for {dtype}")
        if value.dim() != 2 or value.shape[1] != self.cfg.hidden_dim:
            raise EpInputError(f"{name} has shape {tuple(value.shape)}; expected [n, hidden_dim={self.cfg.hidden_dim}]")
        if value.shape[0] > limit:
            raise EpInputError(f"{name} has {value.shape[0]} rows (tokens), above {limit_name}={limit}")

    def _v1_routing(self, name: str, routing: Any, tokens: int) -> Any:
        """The v1 handle of a v2 one, after checking it belongs to this op and fits the call."""
        if not isinstance(routing, EpDispatchRoutingHandle):
            raise EpRoutingError(
                f"{name} must be a mori.ep.v2.EpDispatchRoutingHandle (from dispatch(..., return_routing=True)), "
                f"got {type(routing).__module__}.{type(routing).__name__}"
            )
        check_made_for(name, routing, self._id, tokens)
        if routing.cur_rank_num_token > self.cfg.max_num_inp_token_per_rank:
            raise EpRoutingError(
                f"{name}.cur_rank_num_token={routing.cur_rank_num_token} is above "
                f"max_num_inp_token_per_rank={self.cfg.max_num_inp_token_per_rank}"
            )
        dest, total = routing.disp_dest_tok_id_map, routing.total_recv_token_num
        expected = (tokens, self.cfg.num_experts_per_token)
        for field, tensor, shape in (("disp_dest_tok_id_map", dest, expected), ("total_recv_token_num", total, (1,))):
            if not hasattr(tensor, "shape") or tuple(tensor.shape) != shape or dtype_name(tensor.dtype) != "int32":
                described = tuple(tensor.shape) if hasattr(tensor, "shape") else type(tensor).__name__
                raise EpRoutingError(f"{name}.{field} must be int32 {list(shape)}, got {described}")
            if tensor.device != self.device:
                raise EpRoutingError(f"{name}.{field} is on {tensor.device}; this op runs on {self.device}")
        return self._encoding.to_v1(routing)

    # ---- MORI's views and helpers ------------------------------------------------------------

    def _latest(self, index: int) -> Any:
        self._check_open("a receive view")
        if self._last is None:
            raise EpInputError("no dispatch yet: the receive views are the outputs of the latest dispatch")
        return self._last[index]

    def recv_tokens(self) -> Any:
        """[R, H] rows the latest dispatch delivered (its ``out``)."""
        return self._latest(0)

    def recv_weights(self) -> Any:
        return self._latest(1)

    def recv_scales(self) -> Any:
        return self._latest(2)

    def recv_indices(self) -> Any:
        return self._latest(3)

    def local_expert_count(self) -> Any:
        """int32 [num_experts_per_rank]: picks of this PE's experts among the rows the latest
        dispatch delivered (a row that picked two of them counts for both). No host sync."""
        import torch

        out_indices, total = self._latest(3), self._latest(4)
        per_rank = self.cfg.num_experts_per_rank
        valid_row = torch.arange(out_indices.shape[0], device=self.device)[:, None] < total
        local = out_indices.long() - self.cfg.rank * per_rank
        slot = torch.where(valid_row & (local >= 0) & (local < per_rank), local, per_rank).reshape(-1)
        # scatter_add, not bincount: bincount sizes its output on the host (a device sync on a GPU).
        counts = torch.zeros(per_rank + 1, dtype=torch.int32, device=self.device)
        counts.scatter_add_(0, slot, torch.ones_like(slot, dtype=torch.int32))
        return counts[:per_rank]  # the last slot collected the picks that are not this PE's

    # ---- lifecycle -----------------------------------------------------------------------

    def reset(self) -> None:
        """Collective in MORI (it wipes the arena); the v1 kernels reset their own state, so there
        is nothing to do here. Call it on every PE anyway, for code that also runs on MORI."""
        self._check_open("reset")
        self._v1.reset()

    def close(self) -> None:
        """Collective: frees the op's symmetric region. Later calls raise EpOpClosedError; a second
        close does nothing."""
        if self._closed:
            return
        self._closed = True
        self._last = None
        try:
            if self._scatter is not None:
                self._scatter.close()
        finally:
            self._v1.close()

    def __enter__(self) -> EpDispatchCombineOp:
        self._check_open("__enter__")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.cfg
        memory = "mori.shmem" if self.comm is None else "a mori.cco communicator"
        state = "closed" if self._closed else f"backend {NATIVE_BACKEND} on {self.device} over {memory}"
        return (
            f"mori.ep.v2.EpDispatchCombineOp(#{self._id}, rank {c.rank}/{c.world_size}, hidden {c.hidden_dim}, "
            f"top-{c.num_experts_per_token}, {c.num_experts_per_rank} experts/rank, {c.dtype_str}, "
            f"{c.combine_mode} combine, quant {c.quant_type}, {state})"
        )
