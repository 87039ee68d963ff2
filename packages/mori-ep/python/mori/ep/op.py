# SPDX-License-Identifier: MIT
"""``EpDispatchCombineOp``: MORI's expert-parallel dispatch/combine operator.

Dispatch sends each token, once per destination PE, to every PE that owns one of its top-k
experts; combine brings each PE's (already locally reduced) expert output back to the token's
source PE and sums it. The contract is MORI's (docs/user-guide/ep.md): a token lands at most once
per PE with its full top-k ids and weights; ``src_pos = src_rank * world_size * M + src_token``;
with an identity expert, combine returns ``U * x`` and ``U * w`` (U = distinct destination PEs).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, TypeVar

import mori.shmem as shmem
from mori.ep import byte_rows, inputs, internode_routing, standard_moe
from mori.ep.backends import CpuBackend, CudaBackend
from mori.ep.config import (
    LOW_LATENCY_KERNEL_TYPES,
    EpDispatchCombineConfig,
    EpDispatchCombineKernelType,
    EpDispatchCombineQuantType,
)
from mori.ep.config_check import check_same_config_on_every_pe
from mori.ep.errors import (
    EpConfigError,
    EpInputError,
    EpOpClosedError,
    EpPeerLostError,
    EpRoutingError,
    EpTimeoutError,
    EpUnsupportedError,
)
from mori.ep.kernels import profiling
from mori.ep.launch_config import gpu_model_name, resolve
from mori.ep.layout import (
    BLOCKWISE_QUANT_TYPES,
    CTRL_ERROR,
    CTRL_TOTAL_RECV,
    EXTERNAL_INPUT,
    HAS_SCALES,
    HAS_WEIGHTS,
    REPLAY,
    EpArgs,
    Layout,
    record_bytes,
    recorded_error,
    reply_bytes,
)
from mori.ep.local_expert_count import count_local_experts
from mori.ep.routing import EpDispatchRoutingHandle, check_made_for, new_op_id
from mori.ep.settings import note_geometry_without_effect, note_settings_without_effect, setting
from mori.shmem.errors import HeapExhaustedError
from mori.shmem.proxy_hazards import NEEDED_ENV

logger = logging.getLogger("mori.ep")

_GROUP = 8  # combine sums 8 elements per lane step: hidden must be a multiple of it
# Profiling: warp slots cover grids up to 512 blocks x 16 warps; a call records a handful of
# events per warp, so a few calls fit before the per-warp ring wraps.
TRACE_WARPS = 8192
TRACE_EVENTS_PER_WARP = 32
_RECV_HALF_GEOMETRY = "the receive half runs with the geometry of its send half"
_Pending = TypeVar("_Pending")


def _capturing() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


class EpDispatchCombineOp:
    """One dispatch/combine operator over ``config.world_size`` PEs (collective to create).

    mori-shmem must be initialised with ``world_size`` PEs and this process as ``rank``. The op
    carves one region of the symmetric heap (``required_heap_bytes``) and runs on the backend of
    the heap: tensors are CPU tensors on the cpu backend, tensors on ``shmem_cuda_device()`` on the
    cuda one.
    """

    def __init__(self, config: EpDispatchCombineConfig) -> None:
        import torch

        self.check_creation(config, "call shmem_init_attr (or a framework init) first")
        hazards = shmem.device_proxy_hazards() if config.routing_group else []
        if hazards:
            needed = " and ".join(f"{name}={value}" for name, value in NEEDED_ENV.items())
            raise EpConfigError(
                f"kernel_type={config.kernel_type.name} waits in kernels for other hosts' batches, which this "
                f"process's device proxy applies, but {'; and '.join(hazards)}: set {needed} before CUDA starts"
            )
        self.config = config
        self._torch = torch
        self._id = new_op_id()  # its routing handles carry it
        self._closed = False
        self.layout = Layout.for_config(config)
        cuda_device = shmem.shmem_cuda_device() if shmem.shmem_backend() == "cuda" else None
        self.device = torch.device("cpu") if cuda_device is None else torch.device("cuda", cuda_device)
        self._bind_backend(cuda_device)
        logger.debug("op region: %d bytes", self.layout.nbytes)
        try:
            self._buffer = shmem.shmem_empty(self.layout.nbytes, "uint8")  # collective
        except HeapExhaustedError as exc:
            raise HeapExhaustedError(
                f"the op needs {self.layout.nbytes} bytes of symmetric heap ({exc}); raise MORI_SHMEM_HEAP_SIZE"
            ) from exc
        self._region = self._buffer.torch()
        self._region[: self.layout.offsets["off_disp_tokens"]].zero_()  # control words; buffers need no zeros
        self._peer_regions = torch.tensor(
            [self._buffer.peer(pe).ptr for pe in range(config.world_size)], dtype=torch.int64, device=self.device
        )
        timeout_ns = int(setting("MORI_EP_TIMEOUT") * 1e9)
        self._base = self.layout.base_args(config, self._buffer.ptr, self._peer_regions.data_ptr(), timeout_ns)
        self._trace = None
        if profiling() and isinstance(self._backend, CudaBackend):
            import mori.viz

            self._trace = mori.viz.allocate(TRACE_WARPS, TRACE_EVENTS_PER_WARP, pe=config.rank, device=self.device)
            self._base.trace_buf = self._trace.data_ptr()
        self.local_expert_count = torch.zeros(config.num_experts_per_rank, dtype=torch.int32, device=self.device)
        self._dispatched_tokens: int | None = None
        # Inter-node types: a combine ran since the last dispatch (a second one would race it).
        self._combined_since_dispatch = False
        # The send half of an inter-node call until its receive half runs (AsyncLL: the user's call).
        self._pending_dispatch: tuple[EpArgs, bool, int, int, bool] | None = None
        self._pending_combine: tuple[EpArgs, str, int, int, int] | None = None
        self._pending_routing: EpDispatchRoutingHandle | None = None  # inter-node: filled by the receive half
        self._moe_layout: standard_moe.StandardMoeLayout | None = None
        if self._inter_node and isinstance(self._backend, CudaBackend):
            self._backend.prepare_net(
                low_latency=config.kernel_type in LOW_LATENCY_KERNEL_TYPES,
                combine_dtypes=self._usual_combine_dtypes(),
                quant=int(config.quant),
            )
        self._backend.synchronize()
        shmem.shmem_barrier_all()  # every PE's control words are zero before any peer writes them

    @classmethod
    def check_creation(cls, config: EpDispatchCombineConfig, init_hint: str) -> None:
        """What creating an op on ``config`` checks first, here and in mori.jax (collective: the
        config fingerprint): mori.shmem initialised (else EpConfigError with ``init_hint``), the
        same config on every PE, the config's rank and world those of mori.shmem, every peer
        reachable; settings without effect are logged."""
        if not shmem.shmem_is_initialized():
            raise EpConfigError(f"mori.shmem is not initialised: {init_hint}")
        check_same_config_on_every_pe(config, cls._buffer_settings(config))  # collective
        note_settings_without_effect(config)
        if shmem.shmem_npes() != config.world_size or shmem.shmem_mype() != config.rank:
            raise EpConfigError(
                f"config says rank {config.rank} of {config.world_size}, but mori.shmem runs PE "
                f"{shmem.shmem_mype()} of {shmem.shmem_npes()}"
            )
        cls._check_reachable(config)

    @staticmethod
    def _buffer_settings(config: EpDispatchCombineConfig) -> dict[str, Any]:
        """Environment settings that shape the op's buffers: every PE must read the same values."""
        if config.quant in BLOCKWISE_QUANT_TYPES:
            return {"MORI_FP8_COMBINE_SCALE_DIM": setting("MORI_FP8_COMBINE_SCALE_DIM")}
        return {}

    @staticmethod
    def _check_reachable(config: EpDispatchCombineConfig) -> None:
        """The PEs an op's node-local steps load and store must be P2P peers of this one."""
        group = config.routing_group
        first, count = (config.rank // group * group, group) if group else (0, config.world_size)
        remote = [pe for pe in range(first, first + count) if shmem.shmem_pe_transport(pe) == "remote"]
        if not remote:
            return
        if not group:
            raise EpUnsupportedError(
                f"PEs {remote} are reached through mori-shmem's remote transport (another host, or "
                "MORI_SHMEM_PES_PER_NODE / MORI_NODE_ID / MORI_DISABLE_P2P); kernel_type="
                f"{config.kernel_type.name} needs every PE load/store reachable: use InterNode, InterNodeV1, "
                "InterNodeV1LL or AsyncLL"
            )
        raise EpConfigError(
            f"gpu_per_node={config.gpu_per_node} puts PEs {list(range(first, first + count))} in PE "
            f"{config.rank}'s node, but mori-shmem reaches {remote} only through its remote transport; "
            "set gpu_per_node to the PEs per host (MORI_SHMEM_PES_PER_NODE when one host stands for several)"
        )

    def _check_open(self, call: str) -> None:
        if self._closed:
            raise EpOpClosedError(f"{call}() on a closed op (rank {self.config.rank}): create a new op")

    def _usual_combine_dtypes(self) -> tuple[str, ...]:
        """bf16 and the config's data_type where combine takes it; an inter-node cuda op loads their
        combine kernels up front (CudaBackend.prepare_net says why)."""
        if self.config.quant != EpDispatchCombineQuantType.None_:
            return ("bfloat16",)
        usual = str(self.config.data_type).removeprefix("torch.")
        return ("bfloat16", usual) if usual in inputs.COMBINE_DTYPES and usual != "bfloat16" else ("bfloat16",)

    def _load_combine_safely(self, dtype: str) -> None:
        """A combine dtype not loaded up front: its kernels load once this PE's queued network waits
        are over (CudaBackend.prepare_net says why), so not inside a CUDA graph capture."""
        assert isinstance(self._backend, CudaBackend)
        if self._backend.has_combine(dtype, int(self.config.quant)):
            return
        if self._torch.cuda.is_current_stream_capturing():
            raise EpConfigError(
                f"the first inter-node combine of {dtype} rows loads its kernels, which cannot happen during "
                f"CUDA graph capture; run one combine of {dtype} before capturing (ops load "
                f"{', '.join(self._usual_combine_dtypes())} up front)"
            )
        self._backend.synchronize()
        self._backend.load_combine(dtype, int(self.config.quant))

    @property
    def _inter_node(self) -> bool:
        return self.config.routing_group > 0

    @property
    def _split(self) -> bool:
        return self.config.kernel_type == EpDispatchCombineKernelType.AsyncLL

    # ---- sizes (MORI's accessors) ----------------------------------------------------------

    def max_num_tokens_to_send(self) -> int:
        return self.config.max_num_tokens_to_send()

    def max_num_tokens_to_send_per_rank(self) -> int:
        return self.config.max_num_tokens_to_send_per_rank()

    def max_num_tokens_to_recv(self) -> int:
        return self.config.max_num_tokens_to_recv()

    def max_num_tokens_to_recv_per_rank(self) -> int:
        return self.config.max_num_tokens_to_recv_per_rank()

    @staticmethod
    def required_heap_bytes(config: EpDispatchCombineConfig) -> int:
        """Symmetric-heap bytes an op of ``config`` takes (set MORI_SHMEM_HEAP_SIZE above this)."""
        return Layout.for_config(config).nbytes

    # ---- views of the region ---------------------------------------------------------------

    def _view(self, name: str, rows: int, cols: int, dtype: Any) -> Any:
        start = self.layout.offsets[name]
        itemsize = self._torch.empty(0, dtype=dtype).element_size()
        return self._region[start : start + rows * cols * itemsize].view(dtype).view(rows, cols)

    def _total_recv_view(self) -> Any:
        return self._region[CTRL_TOTAL_RECV : CTRL_TOTAL_RECV + 4].view(self._torch.int32)

    def get_registered_combine_input_buffer(self, dtype: Any, hidden_dim: int = -1) -> Any:
        """``[max_num_tokens_to_recv(), hidden]`` view of the registered combine input: with
        ``use_external_inp_buf=False`` expert outputs are written here (row i for received row i)."""
        hidden = self.config.hidden_dim if hidden_dim == -1 else hidden_dim
        itemsize = self._torch.empty(0, dtype=dtype).element_size()
        if not 0 < hidden <= self.config.hidden_dim or itemsize > self.config.max_token_type_size:
            raise EpInputError(
                f"hidden_dim={hidden_dim} / dtype={dtype} exceed config.hidden_dim={self.config.hidden_dim} / "
                f"max_token_type_size={self.config.max_token_type_size}"
            )
        return self._view("off_comb_tokens", self.layout.max_recv, hidden, dtype)

    def _bind_backend(self, cuda_device: int | None) -> None:
        """The backend the kernels run on (cuda on ``cuda_device``, cpu when None), the GPU's
        architecture and model that pick its tuning file, and ``_launch``, the launch geometry
        resolver bound to them and the config (each call passes its phase, shape and overrides)."""
        if cuda_device is None:
            self._backend: CpuBackend | CudaBackend = CpuBackend()
            self._arch = self._gpu = ""
        else:
            self._backend = CudaBackend(self.config.world_size, self.config.num_experts_per_token, cuda_device)
            major, minor = self._torch.cuda.get_device_capability(self.device)
            self._arch = f"sm{major}{minor}"
            self._gpu = gpu_model_name(self._torch.cuda.get_device_name(self.device))
        self._launch = functools.partial(resolve, self.config, arch=self._arch, gpu=self._gpu)

    # ---- launch geometry ---------------------------------------------------------------------

    def get_launch_config(
        self,
        is_dispatch: bool = True,
        block_num: int = -1,
        rdma_block_num: int = -1,
        warp_per_block: int = -1,
        *,
        dtype: Any = None,
        num_tokens: int | None = None,
        hidden: int | None = None,
        zero_copy: bool = False,
    ) -> tuple[int, int, int]:
        """The resolved ``(block_num, rdma_block_num, warp_per_block)`` of a call."""
        launch = self._launch(
            phase="dispatch" if is_dispatch else "combine",
            dtype=inputs.dtype_name(self._torch.empty(0, dtype=dtype or self.config.data_type)),
            tokens=num_tokens if num_tokens is not None else self.config.max_num_inp_token_per_rank,
            hidden=hidden if hidden is not None else self.config.hidden_dim,
            block_num=block_num,
            warp_per_block=warp_per_block,
            rdma_block_num=rdma_block_num,
            combine_key=None if is_dispatch else (zero_copy, self.config.quant_type),
        )
        return launch.block_num, launch.rdma_block_num, launch.warp_per_block

    # ---- dispatch ------------------------------------------------------------------------

    def dispatch(
        self,
        input: Any,
        weights: Any,
        scales: Any,
        indices: Any,
        block_num: int = -1,
        rdma_block_num: int = -1,
        warp_per_block: int = -1,
        call_local_expert_count: bool = False,
        *,
        routing: Any = None,
        return_routing: bool = False,
    ) -> tuple[Any, ...]:
        """Sends every row of ``input`` [N, H] to the PEs owning its experts (``indices`` [N, K]
        int32, -1 = none); returns ``(out [R, H], out_weights [R, K], out_scales [R, S] | None,
        out_indices [R, K], total_recv [1])``, views of the op's buffers of which rows
        ``[:total_recv]`` are valid (R = max_num_tokens_to_recv()), plus an
        ``EpDispatchRoutingHandle`` when ``return_routing``. With ``routing=h`` the rows go to the
        slots of the dispatch ``h`` came from (every PE replays its own handle of it); AsyncLL's
        handle, like its rows, is filled by ``dispatch_recv``. No host sync (except the expert-id
        check of MORI_EP_VALIDATE_INDICES outside graph capture)."""
        self._check_open("dispatch")
        config = self.config
        inputs.check_dispatch(config, self.device, input, weights, scales, indices)
        if self._pending_dispatch is not None:
            raise EpInputError("dispatch_send was called twice: call dispatch_recv for the first one")
        if routing is not None:
            self._check_routing(routing, int(input.shape[0]))
        elif setting("MORI_EP_VALIDATE_INDICES") and not _capturing():
            inputs.check_expert_ids(config, indices)
        width = int(input.shape[1])
        if byte_rows.needs_padding(input):  # checked above at its own width
            input = byte_rows.padded(input, config)
            self._padded_input = input  # alive until the next dispatch, whatever the backend's queue holds
            hidden = row_bytes = int(input.shape[1])
        else:
            hidden, row_bytes = inputs.check_row("input", input, config)
        dtype = inputs.dtype_name(input)
        launch = self._launch(
            phase="dispatch",
            dtype=dtype,
            tokens=int(input.shape[0]),
            hidden=hidden,
            block_num=block_num,
            warp_per_block=warp_per_block,
            rdma_block_num=rdma_block_num,
        )

        args = EpArgs.from_buffer_copy(self._base)
        args.input = input.data_ptr()
        args.indices = indices.data_ptr()
        args.num_tokens = int(input.shape[0])
        args.hidden = hidden
        args.row_bytes = args.wire_row_bytes = row_bytes
        flags = 0
        if weights is not None:
            args.weights = weights.data_ptr()
            flags |= HAS_WEIGHTS
        scale_cols = 0
        if scales is not None:
            args.scales = scales.data_ptr()
            scale_cols = int(scales.shape[1])
            args.scale_bytes = scale_cols * scales.element_size()
            flags |= HAS_SCALES
        if routing is not None:
            self._load_routing(routing, combine=False)
            flags |= REPLAY
        args.flags = flags
        handle = internode_routing.new_handle(self, args.num_tokens) if return_routing and self._inter_node else None
        low_latency = config.kernel_type in LOW_LATENCY_KERNEL_TYPES
        grid, block = launch.block_num, 32 * launch.warp_per_block
        if self._inter_node:
            args.record_bytes = record_bytes(row_bytes, config.num_experts_per_token, args.scale_bytes)
            self._backend.net_dispatch_send(args, grid=grid, block=block, send_blocks=launch.rdma_block_num or grid)
            self._pending_dispatch = (args, low_latency, grid, block, call_local_expert_count)
            self._pending_routing = handle
            if not self._split:
                self.dispatch_recv()
        else:
            self._backend.dispatch(args, low_latency=low_latency, grid=grid, block=block)
            self._after_call()
        self._dispatched_tokens = args.num_tokens
        self._combined_since_dispatch = False

        recv, topk, torch = self.layout.max_recv, config.num_experts_per_token, self._torch
        out = self._view("off_disp_tokens", recv, hidden, input.dtype)[:, :width]
        out_weights = self._view("off_disp_weights", recv, topk, torch.float32)
        out_scales = self._view("off_disp_scales", recv, scale_cols, scales.dtype) if scales is not None else None
        out_indices = self._view("off_disp_indices", recv, topk, torch.int32)
        total_recv = self._total_recv_view()
        if call_local_expert_count and not self._inter_node:
            self._count_local_experts(out_indices, total_recv)
        if return_routing:
            if handle is None:
                empty = torch.empty(0, dtype=torch.int32, device=self.device)
                handle = EpDispatchRoutingHandle(
                    self._view("off_dest_map", args.num_tokens, topk, torch.int32).clone(),
                    empty,
                    empty.clone(),
                    total_recv.clone(),
                    self._view("off_disp_src_pos", recv, 1, torch.int32).view(-1).clone(),
                    args.num_tokens,
                )
                handle.owner = self._id
            return out, out_weights, out_scales, out_indices, total_recv, handle
        return out, out_weights, out_scales, out_indices, total_recv

    def _check_routing(self, routing: Any, tokens: int) -> None:
        if not isinstance(routing, EpDispatchRoutingHandle):
            raise EpRoutingError(f"routing must be an EpDispatchRoutingHandle, got {type(routing).__name__}")
        check_made_for("routing", routing, self._id, tokens)
        topk = self.config.num_experts_per_token
        inputs.check_tensor(
            "routing.disp_dest_tok_id_map", routing.disp_dest_tok_id_map, device=self.device, dtypes=("int32",),
            rows=(tokens, tokens), cols=topk,
        )  # fmt: skip
        inputs.check_tensor(
            "routing.total_recv_token_num", routing.total_recv_token_num, device=self.device, dtypes=("int32",),
            ndim=1, rows=(1, 1),
        )  # fmt: skip
        if self._inter_node:
            internode_routing.check(self, routing)

    def _load_routing(self, routing: EpDispatchRoutingHandle, *, combine: bool) -> None:
        """The handle's layout into the op's dest map and receive total (device copies, graph-safe)."""
        if self._inter_node:
            internode_routing.load(self, routing, combine=combine)
            return
        tokens, topk = routing.cur_rank_num_token, self.config.num_experts_per_token
        self._view("off_dest_map", tokens, topk, self._torch.int32).copy_(routing.disp_dest_tok_id_map)
        self._total_recv_view().copy_(routing.total_recv_token_num)

    def _count_local_experts(self, out_indices: Any, total_recv: Any) -> None:
        """``local_expert_count[e]`` = received rows that picked local expert e, without a host sync."""
        count_local_experts(
            out_indices, total_recv, self.local_expert_count, self.config.rank, self.config.num_experts_per_rank
        )

    def dispatch_send(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """MORI's split API. AsyncLL: packs and sends this PE's tokens and returns dispatch's
        outputs, whose rows are valid once ``dispatch_recv`` returns; compute may run in between.
        The other kernel types: the whole dispatch."""
        return self.dispatch(*args, **kwargs)

    def dispatch_recv(
        self, block_num: int = -1, warp_per_block: int = -1, call_local_expert_count: bool = False
    ) -> None:
        """AsyncLL: waits for the records of every node and fans them out (the receive half of
        ``dispatch_send``)."""
        args, low_latency, grid, block, count_experts = self._sent_half(
            "dispatch", self._pending_dispatch, block_num, warp_per_block
        )
        routing, self._pending_dispatch, self._pending_routing = self._pending_routing, None, None
        self._backend.net_dispatch_recv(args, low_latency=low_latency, grid=grid, block=block)
        if routing is not None:
            internode_routing.fill(self, routing)
        self._after_call()
        if count_experts or call_local_expert_count:
            recv, topk = self.layout.max_recv, self.config.num_experts_per_token
            self._count_local_experts(
                self._view("off_disp_indices", recv, topk, self._torch.int32), self._total_recv_view()
            )

    def _sent_half(self, phase: str, pending: _Pending | None, block_num: int, warp_per_block: int) -> _Pending:
        """What ``<phase>_send`` left for ``<phase>_recv`` (a receive half takes no geometry of its own)."""
        note_geometry_without_effect(f"{phase}_recv", block_num, warp_per_block, _RECV_HALF_GEOMETRY)
        if pending is None:
            raise EpInputError(
                f"{phase}_recv completes an AsyncLL {phase}_send; none is pending (kernel_type "
                f"{self.config.kernel_type.name})"
            )
        return pending

    # ---- combine -------------------------------------------------------------------------

    def combine(
        self,
        input: Any,
        weights: Any,
        indices: Any,
        block_num: int = -1,
        rdma_block_num: int = -1,
        warp_per_block: int = -1,
        use_external_inp_buf: int = -1,
        call_reset: bool = False,
        *,
        routing: Any = None,
    ) -> tuple[Any, Any]:
        """Returns ``(out [M, H], out_weights [M, K] | None)`` where row t (t < N of the last
        dispatch) sums, over the distinct PEs token t was sent to, the row each of them holds for
        it: ``input`` row i (i < total_recv) with an external input, else row i of
        ``get_registered_combine_input_buffer()``. ``indices`` is this PE's routing of the last
        dispatch ([N, K], not dispatch's out_indices)."""
        self._check_open("combine")
        if routing is None and self._dispatched_tokens is None:
            raise EpInputError("combine was called before any dispatch of this op")
        if self._pending_dispatch is not None or self._pending_combine is not None:
            raise EpInputError("an AsyncLL dispatch_send/combine_send is still waiting for its _recv half")
        if self._inter_node and self._combined_since_dispatch:
            # The second combine's replies may reach a source before it has summed the first's,
            # over them, and the remote transport may reorder the two: wrong sums or a timeout.
            raise EpInputError(
                f"combine was called twice without a dispatch between them; kernel type "
                f"{self.config.kernel_type!r} crosses hosts and needs one (dispatch(routing=handle) replays "
                "the last routing without recomputing it)"
            )
        config, torch = self.config, self._torch
        external = config.use_external_inp_buf if use_external_inp_buf == -1 else bool(use_external_inp_buf)
        tokens = routing.cur_rank_num_token if routing is not None else self._dispatched_tokens
        assert tokens is not None
        recv, topk = self.layout.max_recv, config.num_experts_per_token
        if routing is not None:
            self._check_routing(routing, tokens)
        combine_dtypes = (*inputs.COMBINE_DTYPES, *inputs.FP8_COMBINE_DTYPES)
        inputs.check_combine_dtype(input)
        inputs.check_tensor("input", input, device=self.device, dtypes=combine_dtypes, rows=(0, recv))
        hidden, row_bytes = inputs.check_row("input", input, config)
        if hidden % _GROUP:
            raise EpInputError(f"input has hidden size {hidden}; combine needs a multiple of {_GROUP}")
        inputs.check_tensor("indices", indices, device=self.device, dtypes=("int32",), rows=(tokens, tokens), cols=topk)
        if weights is not None:
            inputs.check_tensor("weights", weights, device=self.device, dtypes=("float32",), rows=(0, recv), cols=topk)
            weights = self._weights_per_input_row(weights, int(input.shape[0]))
        quant = config.quant
        dtype = inputs.dtype_name(input)
        wire_row_bytes = row_bytes
        if quant != EpDispatchCombineQuantType.None_:
            if not external or dtype != "bfloat16":
                raise EpInputError(
                    f"quant_type={config.quant_type!r} needs an external bf16 input; got dtype {dtype} and "
                    f"use_external_inp_buf={external}"
                )
            if quant in BLOCKWISE_QUANT_TYPES and hidden % (_GROUP * self.layout.quant_blocks):
                raise EpInputError(
                    f"input has hidden size {hidden}; {config.quant_type} needs a multiple of "
                    f"{_GROUP} x MORI_FP8_COMBINE_SCALE_DIM={self.layout.quant_blocks}"
                )
            wire_row_bytes = hidden // 2 if quant == EpDispatchCombineQuantType.Fp4BlockwiseQuant else hidden
        launch = self._launch(
            phase="combine",
            dtype=dtype,
            tokens=tokens,
            hidden=hidden,
            block_num=block_num,
            warp_per_block=warp_per_block,
            rdma_block_num=rdma_block_num,
            combine_key=(not external, config.quant_type),
        )

        if routing is not None:
            self._load_routing(routing, combine=True)
        args = EpArgs.from_buffer_copy(self._base)
        args.num_tokens = tokens
        args.hidden = hidden
        args.row_bytes = row_bytes
        args.wire_row_bytes = wire_row_bytes
        args.input_rows = int(input.shape[0])
        flags = 0
        if external:
            args.input = input.data_ptr()
            flags |= EXTERNAL_INPUT
        if weights is not None:
            args.weights = weights.data_ptr()
            flags |= HAS_WEIGHTS
        args.flags = flags
        grid, block = launch.block_num, 32 * launch.warp_per_block
        stage_grid = launch.block_num if flags else 1
        if self._inter_node:
            if isinstance(self._backend, CudaBackend):
                self._load_combine_safely(dtype)
            args.reply_bytes = reply_bytes(row_bytes, topk)
            self._backend.net_combine_send(
                args,
                dtype=dtype,
                quant=int(quant),
                grid=grid,
                block=block,
                stage_grid=stage_grid,
                send_blocks=launch.rdma_block_num or grid,
            )
            self._pending_combine = (args, dtype, int(quant), grid, block)
            self._combined_since_dispatch = True
            if not self._split:
                self.combine_recv()
        else:
            self._backend.combine(args, dtype=dtype, quant=int(quant), grid=grid, block=block, stage_grid=stage_grid)
            self._after_call()
        if call_reset:
            self.reset()
        out = self._view("off_comb_out", config.max_num_inp_token_per_rank, hidden, input.dtype)
        out_weights = (
            self._view("off_comb_out_weights", config.max_num_inp_token_per_rank, topk, torch.float32)
            if weights is not None
            else None
        )
        return out, out_weights

    def _weights_per_input_row(self, weights: Any, rows: int) -> Any:
        """Combine's weights are per received row, like its input. vLLM passes the token's own
        [N, K] top-k weights instead (MORI reads past them; vLLM ignores the summed weights): rows
        the tensor lacks count as zero weights, rows past the input are not read."""
        if weights.shape[0] == rows:
            return weights
        logger.debug("combine: weights has %d rows, input %d; the missing rows count as 0", weights.shape[0], rows)
        fitted = self._torch.zeros(rows, weights.shape[1], dtype=weights.dtype, device=weights.device)
        common = min(rows, int(weights.shape[0]))
        fitted[:common].copy_(weights[:common])
        return fitted

    def combine_send(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """MORI's split API. AsyncLL: stages and sends the expert outputs and returns combine's
        outputs, valid once ``combine_recv`` returns. The other kernel types: the whole combine."""
        return self.combine(*args, **kwargs)

    def combine_recv(self, block_num: int = -1, warp_per_block: int = -1) -> None:
        """AsyncLL: waits for every node's replies and sums them (the receive half of ``combine_send``)."""
        args, dtype, quant, grid, block = self._sent_half("combine", self._pending_combine, block_num, warp_per_block)
        self._pending_combine = None
        self._backend.net_combine_recv(args, dtype=dtype, quant=quant, grid=grid, block=block)
        self._after_call()

    # ---- DeepEP-compatible standard MoE layout -----------------------------------------------

    def convert_dispatch_output(
        self, dispatch_out_x: Any, dispatch_out_topk_idx: Any, total_recv: Any = None
    ) -> tuple[Any, Any, Any, Any]:
        """Dispatch's received rows grouped per local expert: ``(packed_recv_x [E_loc, R, H],
        packed_recv_count [E_loc], packed_recv_src_info [E_loc, R], packed_recv_layout_range)``
        (the last empty, as in MORI). See :mod:`mori.ep.standard_moe`."""
        total = self._total_recv_view() if total_recv is None else total_recv
        *packed, self._moe_layout = standard_moe.convert_dispatch_output(
            self, dispatch_out_x, dispatch_out_topk_idx, total
        )
        return packed[0], packed[1], packed[2], packed[3]

    def convert_combine_input(
        self,
        packed_recv_x: Any,
        packed_recv_src_info: Any = None,
        packed_recv_layout_range: Any = None,
        weights: Any = None,
    ) -> Any:
        """The experts' outputs in the packed layout of the last ``convert_dispatch_output``, summed
        per received row (weighted by ``weights``, default the dispatched weights) into the
        registered combine buffer; returns its ``[R, H]`` view for ``combine(...,
        use_external_inp_buf=0)``."""
        del packed_recv_src_info, packed_recv_layout_range  # the layout is the op's own record
        if self._moe_layout is None:
            raise EpInputError("convert_combine_input needs a convert_dispatch_output (or dispatch_standard_moe) first")
        if weights is None:
            weights = self._view(
                "off_disp_weights", self.layout.max_recv, self.config.num_experts_per_token, self._torch.float32
            )
        return standard_moe.convert_combine_input(self, packed_recv_x, weights, self._moe_layout)

    def dispatch_standard_moe(
        self, input: Any, weights: Any, scales: Any, indices: Any, **kwargs: Any
    ) -> tuple[Any, Any, Any, Any]:
        """``dispatch`` then ``convert_dispatch_output``."""
        out, _, _, out_indices, total_recv = self.dispatch(input, weights, scales, indices, **kwargs)
        return self.convert_dispatch_output(out, out_indices, total_recv)

    def combine_standard_moe(self, input: Any, weights: Any, indices: Any, **kwargs: Any) -> tuple[Any, Any]:
        """``convert_combine_input`` of ``input`` [E_loc, R, H] then a zero-copy ``combine``; returns
        ``(out [M, H], None)``."""
        registered = self.convert_combine_input(input)
        out, _ = self.combine(registered, weights, indices, use_external_inp_buf=0, **kwargs)
        return out, None

    # ---- state ---------------------------------------------------------------------------

    def reset(self) -> None:
        """Kept for MORI's API: the kernels reset their own state, so there is nothing to do."""

    def _after_call(self) -> None:
        # The cpu backend has finished by now: report its errors at once. On the GPU reading the
        # error word is a sync, so it waits for check_error().
        if isinstance(self._backend, CpuBackend):
            self.check_error()

    def check_error(self) -> None:
        """Raises the first error the kernels recorded since the last check (a device sync on the
        cuda backend): EpTimeoutError, EpOverflowError, or EpInputError for a bad expert id or a
        combine input shorter than total_recv; for the inter-node types on the GPU also a transfer
        that mori-shmem's device proxy could not complete. Clears it."""
        self._backend.synchronize()
        word = self._region[CTRL_ERROR : CTRL_ERROR + 4].view(self._torch.int32)
        code = int(word.item())
        if code == 0:
            if self._inter_node and isinstance(self._backend, CudaBackend):
                self._check_device_proxy()
            return
        word.zero_()
        self._backend.synchronize()
        raise recorded_error(code, self.config, self.layout.max_recv)

    def _check_device_proxy(self) -> None:
        """The device proxy's failures (mori-shmem's device error word) as mori.ep errors."""
        from mori.shmem.errors import WaitTimeoutError

        try:
            shmem.shmem_check_device_error()
        except WaitTimeoutError as exc:
            raise EpTimeoutError(f"PE {self.config.rank}: a transfer to another node stalled: {exc}") from None
        except Exception as exc:  # unreachable PE, bad address: the transfer did not happen
            raise EpPeerLostError(f"PE {self.config.rank}: a transfer to another node failed: {exc}") from None

    def get_debug_time_buf(self) -> Any:
        """The mori-viz trace buffer the kernels write when MORI_ENABLE_PROFILER=1 (cuda backend):
        every warp's begin/end stamps of ``dispatch/send``, ``dispatch/complete``,
        ``combine/stage``, ``combine/barrier`` and ``combine/accumulate``. Read it with
        ``mori.viz`` and the slot table ``mori.ep.kernels.SLOTS_FILE``; ``mori.viz.reset`` clears it."""
        if self._trace is None:
            raise EpConfigError(
                "no trace buffer: set MORI_ENABLE_PROFILER=1 before creating the op (cuda backend, mori-viz installed)"
            )
        return self._trace

    def get_debug_time_offset(self) -> Any:
        """MORI's per-warp write offsets of the trace buffer: an int32 view [warps] of each warp
        slot's event count in ``get_debug_time_buf()`` (it keeps counting when the warp's ring wraps)."""
        import mori.viz.layout as viz_layout

        trace = self.get_debug_time_buf()
        start = viz_layout.warp_headers_offset()
        headers = trace[start : viz_layout.events_offset(TRACE_WARPS)].view(self._torch.int32)
        fields = viz_layout.WARP_HEADER_DTYPE.fields
        assert fields is not None  # a structured dtype
        count_word = int(fields["count"][1]) // 4
        return headers.view(TRACE_WARPS, viz_layout.WARP_HEADER_BYTES // 4)[:, count_word]

    @property
    def _handle(self) -> EpDispatchCombineOp:
        """MORI code hands ``op._handle`` to ``mori.cpp`` functions; here the op is its own handle."""
        return self

    def get_dispatch_src_token_pos(self) -> Any:
        """Source position of every received row, ``src_rank * world_size * M + src_token``
        (``decode_send_flat_idx`` splits it). Syncs the device."""
        self._backend.synchronize()
        total = int(self._total_recv_view().item())
        return self._view("off_disp_src_pos", self.layout.max_recv, 1, self._torch.int32).view(-1)[:total]

    def decode_send_flat_idx(self, pos: Any) -> tuple[Any, Any]:
        """``(src_rank, src_token)`` of source positions (ints or tensors)."""
        stride = self.config.world_size * self.config.max_num_inp_token_per_rank
        return pos // stride, pos % stride

    def close(self) -> None:
        """Collective: frees the op's region. Its dispatch and combine raise EpOpClosedError afterwards
        (its routing handles are another op's to any new op: EpRoutingError); a second close does
        nothing."""
        if self._closed:
            return
        self._backend.synchronize()
        self._buffer.free()
        self._closed = True

    def __enter__(self) -> EpDispatchCombineOp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        return (
            f"EpDispatchCombineOp({c.kernel_type.name}, rank {c.rank}/{c.world_size}, hidden {c.hidden_dim}, "
            f"top-{c.num_experts_per_token}, {c.num_experts_per_rank} experts/rank, backend {self._backend.name})"
        )
