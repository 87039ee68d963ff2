# SPDX-License-Identifier: MIT
"""``mori.jax.EpDispatchCombineOp``: MORI's JAX operator, dispatch and combine as the XLA FFI
custom call ``mori_ep`` that runs inside ``jax.jit``.

The op owns a region of the symmetric heap like ``mori.ep.EpDispatchCombineOp`` and runs the same
protocol on it (the cpu backend's host code on the CPU platform, the EP kernels on CUDA). Shapes
and dtypes are checked when a call is traced, before anything runs, with mori.ep's typed errors;
what only the data shows (an expert id out of range, a peer that does not answer) fails the call:
jax raises its runtime error with a message that starts ``mori_ep <mori.ep error class>:`` (on
the GPU, ``check_error()`` reports it, as in mori.ep).
"""

from __future__ import annotations

import gc
import logging
from typing import Any

import numpy as np

import jax
import jax.numpy as jnp
import mori.shmem as shmem
from mori.ep import inputs
from mori.ep.config import QUANT_TYPES, EpDispatchCombineConfig, EpDispatchCombineQuantType, shared_fields
from mori.ep.errors import EpConfigError, EpInputError, EpUnsupportedError
from mori.ep.launch_config import resolve
from mori.ep.layout import recorded_error
from mori.jax import ffi_build, handlers
from mori.jax.region import Region, combine_dtypes

logger = logging.getLogger("mori.jax")

_GROUP = 8  # combine sums 8 elements per lane step (mori.ep.op)
_open_ops: list[EpDispatchCombineOp] = []


def as_config(config: Any) -> EpDispatchCombineConfig:
    """mori.ep's config from either MORI form: the Python dataclass, or mori.cpp's C++ config
    (whose 0 geometry means the Python defaults)."""
    if isinstance(config, EpDispatchCombineConfig):
        return config
    quant = {int(value): name for name, value in QUANT_TYPES.items()}[int(config.quant_type)]
    return EpDispatchCombineConfig(
        data_type="bfloat16",
        **shared_fields(config),
        max_token_type_size=config.max_token_type_size,
        warp_num_per_block=config.warp_num_per_block or EpDispatchCombineConfig.warp_num_per_block,
        block_num=config.block_num or EpDispatchCombineConfig.block_num,
        use_external_inp_buf=bool(config.use_external_inp_buf),
        kernel_type=config.kernel_type,
        gpu_per_node=config.gpu_per_node,
        rdma_block_num=config.rdma_block_num,
        num_qp_per_pe=config.num_qp_per_pe,
        quant_type=quant,
    )


def packed_config(config: EpDispatchCombineConfig) -> np.ndarray[Any, Any]:
    """MORI's packed i32 config (mori.cpp's ``to_packed_array``), the key of the op in the handler."""
    from mori.ep.cpp_names import EpDispatchCombineConfig as CppConfig

    cpp = CppConfig(
        config.rank, config.world_size, config.hidden_dim, config.scale_dim, config.scale_type_size,
        config.max_token_type_size, config.max_num_inp_token_per_rank, config.num_experts_per_rank,
        config.num_experts_per_token, config.max_total_recv_tokens, config.warp_num_per_block, config.block_num,
        config.use_external_inp_buf, config.kernel_type, config.gpu_per_node, config.rdma_block_num,
        config.num_qp_per_pe, config.quant,
    )  # fmt: skip
    return np.asarray(cpp.to_packed_array(), dtype=np.int32)


def _dtype(value: Any) -> str:
    return str(jnp.dtype(value.dtype))


def _check(
    name: str, value: Any, dtypes: tuple[str, ...], rows: tuple[int, int] | None = None, cols: int | None = None
) -> None:
    """A 2-D array of one of ``dtypes`` with ``rows[0] <= rows <= rows[1]`` and ``cols`` columns."""
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise EpInputError(f"{name} must be a jax array, got {type(value).__name__}")
    if _dtype(value) not in dtypes:
        raise EpInputError(f"{name}.dtype={_dtype(value)} is not supported; expected one of {', '.join(dtypes)}")
    if len(value.shape) != 2:
        raise EpInputError(f"{name} must be 2-D, got shape {tuple(value.shape)}")
    if rows is not None and not rows[0] <= value.shape[0] <= rows[1]:
        raise EpInputError(f"{name} has {value.shape[0]} rows; the limit is [{rows[0]}, {rows[1]}]")
    if cols is not None and value.shape[1] != cols:
        raise EpInputError(f"{name} has {value.shape[1]} columns, expected {cols}")


def _row(name: str, value: Any, config: EpDispatchCombineConfig) -> tuple[int, int]:
    """(hidden, row bytes) within the config's limits (mori.ep.inputs.check_row's rules)."""
    return inputs.check_row_size(name, int(value.shape[1]), jnp.dtype(value.dtype).itemsize, _dtype(value), config)


class EpDispatchCombineOp:
    """MORI's ``mori.jax.EpDispatchCombineOp(config)`` (collective to create): ``config`` is
    mori.ep's ``EpDispatchCombineConfig`` or mori.cpp's. mori.shmem must be initialised with
    ``config.world_size`` PEs; the cpu backend serves JAX's CPU platform, the cuda one its GPU."""

    def __init__(self, config: Any) -> None:
        handlers.register_targets()
        self.config = as_config(config)
        self._packed = packed_config(self.config)
        self._region: Region | None = Region.create(self.config)  # collective
        lib = ffi_build.library()
        code = lib.mori_jax_register_op(
            self._packed.ctypes.data, self._packed.size, _addr(self._region.base), _addr(self._region.spec)
        )
        if code:
            self._region.free()
            self._region = None
            raise EpConfigError(
                f"a mori.jax EpDispatchCombineOp of this config (rank {self.config.rank}) is already open in this "
                "process; close it first (MORI shares one handle per config)"
            )
        _open_ops.append(self)

    @property
    def region(self) -> Region:
        if self._region is None:
            raise EpConfigError("this mori.jax EpDispatchCombineOp is closed")
        return self._region

    def max_num_tokens_to_recv(self) -> int:
        return self.config.max_num_tokens_to_recv()

    def _attrs(self, **extra: Any) -> dict[str, Any]:
        return {"ep_config": self._packed, **extra}

    def _geometry(self, phase: str, dtype: str, tokens: int, hidden: int, block_num: int, warp_per_block: int,
                  rdma_block_num: int, combine_key: tuple[bool, str] | None) -> tuple[int, int]:  # fmt: skip
        """(grid, block) of a call on the GPU: mori.ep's resolution (tuning files, then arguments)."""
        region = self.region
        launch = resolve(
            self.config, phase=phase, dtype=dtype, tokens=tokens, hidden=hidden, block_num=block_num,
            warp_per_block=warp_per_block, rdma_block_num=rdma_block_num, combine_key=combine_key, arch=region.arch,
            gpu=region.gpu,
        )  # fmt: skip
        return launch.block_num, 32 * launch.warp_per_block

    def dispatch(
        self,
        input: Any,
        weights: Any,
        scales: Any,
        indices: Any,
        block_num: int = -1,
        rdma_block_num: int = -1,
        warp_per_block: int = -1,
    ) -> list[Any]:
        """Sends every row of ``input`` [N, H] to the PEs owning its experts (``indices`` [N, K]
        int32, -1 = none). Returns MORI's list ``[out [R, H], out_indices [R, K], total_recv [],
        out_weights [R, K] | None, out_scales [R, S] | None]`` (R = max_num_tokens_to_recv(); rows
        ``[:total_recv]`` are valid). Call it inside or outside ``jax.jit``."""
        config = self.config
        topk = config.num_experts_per_token
        _check("input", input, inputs.DISPATCH_DTYPES, rows=(0, config.max_num_inp_token_per_rank))
        rows = int(input.shape[0])
        hidden, _ = _row("input", input, config)
        _check("indices", indices, ("int32",), rows=(rows, rows), cols=topk)
        if weights is not None:
            _check("weights", weights, ("float32",), rows=(rows, rows), cols=topk)
        if scales is not None:
            if config.scale_dim == 0:
                raise EpInputError("scales were passed but config.scale_dim=0")
            _check("scales", scales, inputs.SCALE_DTYPES, rows=(rows, rows))
            scale_bytes = int(scales.shape[1]) * jnp.dtype(scales.dtype).itemsize
            if scale_bytes > config.scale_dim * config.scale_type_size or scale_bytes % 4:
                raise EpInputError(
                    f"scales rows are {scale_bytes} bytes; the limit is config.scale_dim * scale_type_size = "
                    f"{config.scale_dim * config.scale_type_size}, in multiples of 4"
                )
        grid, block = self._geometry(
            "dispatch", _dtype(input), rows, hidden, block_num, warp_per_block, rdma_block_num, None
        )
        recv = config.max_num_tokens_to_recv()
        results = [
            jax.ShapeDtypeStruct((recv, hidden), input.dtype),
            jax.ShapeDtypeStruct((recv, topk), jnp.int32),
            jax.ShapeDtypeStruct((), jnp.int32),
        ]
        operands = [input, indices]
        if weights is not None:
            results.append(jax.ShapeDtypeStruct((recv, topk), jnp.float32))
            operands.append(weights)
        if scales is not None:
            results.append(jax.ShapeDtypeStruct((recv, int(scales.shape[1])), scales.dtype))
            operands.append(scales)
        # has_side_effect: a dispatch whose results go unused must still run, or its peers wait for
        # its rows until they time out; it also keeps XLA from merging two identical dispatches.
        out = jax.ffi.ffi_call(handlers.TARGET, results, has_side_effect=True)(
            *operands,
            **self._attrs(
                dispatch_op=True,
                has_weights=np.int32(weights is not None),
                has_scales=np.int32(scales is not None),
                grid=np.int32(grid),
                block=np.int32(block),
            ),
        )
        out = list(out)
        out_weights = out[3] if weights is not None else None
        out_scales = out[-1] if scales is not None else None
        return [out[0], out[1], out[2], out_weights, out_scales]

    def combine(
        self,
        input: Any,
        weights: Any,
        indices: Any,
        block_num: int = -1,
        rdma_block_num: int = -1,
        warp_per_block: int = -1,
        call_reset: bool = False,
    ) -> list[Any]:
        """Returns MORI's list ``[out [M, H], out_weights [M, K] | None]``: row t (t < N) sums, over
        the distinct PEs token t went to, the row of ``input`` (the expert outputs of the received
        rows, [<= R, H]) each holds for it. ``indices`` is this PE's routing of the dispatch
        ([N, K]); ``weights`` are per received row (rows it lacks count as zero)."""
        del call_reset  # the protocol resets its own state; kept for MORI's signature
        config = self.config
        recv, topk = config.max_num_tokens_to_recv(), config.num_experts_per_token
        if not config.use_external_inp_buf:
            raise EpUnsupportedError(
                "mori.jax combines the expert outputs it is given: use_external_inp_buf=False is not supported"
            )
        dtypes = combine_dtypes(config) if self.region.on_cuda else (*inputs.COMBINE_DTYPES, *inputs.FP8_COMBINE_DTYPES)
        _check("input", input, dtypes, rows=(0, recv))
        hidden, _ = _row("input", input, config)
        if hidden % _GROUP:
            raise EpInputError(f"input has hidden size {hidden}; combine needs a multiple of {_GROUP}")
        _check("indices", indices, ("int32",), rows=(0, config.max_num_inp_token_per_rank), cols=topk)
        dtype = _dtype(input)
        if config.quant != EpDispatchCombineQuantType.None_:
            if dtype != "bfloat16":
                raise EpInputError(f"quant_type={config.quant_type!r} needs a bf16 input; got dtype {dtype}")
            blocks = self.region.layout.quant_blocks
            if config.quant == EpDispatchCombineQuantType.Fp8BlockwiseQuant and hidden % (_GROUP * blocks):
                raise EpInputError(
                    f"input has hidden size {hidden}; fp8_blockwise needs a multiple of "
                    f"{_GROUP} x MORI_FP8_COMBINE_SCALE_DIM={blocks}"
                )
        operands = [input, indices]
        results = [jax.ShapeDtypeStruct((config.max_num_inp_token_per_rank, hidden), input.dtype)]
        if weights is not None:
            _check("weights", weights, ("float32",), rows=(0, recv), cols=topk)
            operands.append(_fit_rows(weights, int(input.shape[0])))
            results.append(jax.ShapeDtypeStruct((config.max_num_inp_token_per_rank, topk), jnp.float32))
        grid, block = self._geometry(
            "combine", dtype, int(indices.shape[0]), hidden, block_num, warp_per_block, rdma_block_num,
            (False, config.quant_type),
        )  # fmt: skip
        out = jax.ffi.ffi_call(handlers.TARGET, results, has_side_effect=True)(
            *operands,
            **self._attrs(
                combine_op=True,
                has_weights=np.int32(weights is not None),
                grid=np.int32(grid),
                block=np.int32(block),
                stage_grid=np.int32(grid),
            ),
        )
        out = list(out)
        return [out[0], out[1] if weights is not None else None]

    def get_dispatch_src_token_pos(self, total_recv_token_num: Any) -> Any:
        """Source position of every receive row, ``src_rank * world_size * M + src_token``, as an
        [R] int32 array (rows ``[:total_recv]`` valid); pass dispatch's ``total_recv`` so the call
        runs after that dispatch."""
        recv = self.config.max_num_tokens_to_recv()
        return jax.ffi.ffi_call(handlers.TARGET, jax.ShapeDtypeStruct((recv,), jnp.int32), has_side_effect=True)(
            total_recv_token_num, **self._attrs(get_src_token_id=True)
        )

    def decode_send_flat_idx(self, pos: Any) -> tuple[Any, Any]:
        """``(src_rank, src_token)`` of source positions."""
        stride = self.config.world_size * self.config.max_num_inp_token_per_rank
        return pos // stride, pos % stride

    def check_error(self) -> None:
        """Raises the first error the protocol recorded since the last check and clears it (a device
        sync on the GPU, where calls do not report errors themselves)."""
        code = self.region.error_word()
        if code != 0:
            raise recorded_error(code, self.config, self.region.layout.max_recv)

    def close(self) -> None:
        """Collective: frees the op's region. Programs traced with it must not run afterwards."""
        if self._region is None:
            return
        ffi_build.library().mori_jax_unregister_op(self._packed.ctypes.data, self._packed.size)
        self._region.free()
        self._region = None
        if self in _open_ops:
            _open_ops.remove(self)

    def __enter__(self) -> EpDispatchCombineOp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        state = "closed" if self._region is None else ("cuda" if self._region.on_cuda else "cpu")
        return f"mori.jax.EpDispatchCombineOp({c.kernel_type.name}, rank {c.rank}/{c.world_size}, {state})"


def _addr(struct: Any) -> int:
    import ctypes

    return ctypes.addressof(struct)


def _fit_rows(weights: Any, rows: int) -> Any:
    """Combine's weights are per received row; vLLM-style callers pass fewer or more: rows the
    array lacks count as zero weights, rows past the input are not read (as mori.ep does)."""
    if weights.shape[0] == rows:
        return weights
    if weights.shape[0] > rows:
        return weights[:rows]
    return jnp.pad(weights, ((0, rows - weights.shape[0]), (0, 0)))


def shmem_init_attr(rank: int, world_size: int, sync_name: str = "mori/unique_id", timeout_ms: int = 5_000) -> int:
    """MORI's: initialises mori.shmem on every process of a ``jax.distributed`` job, process 0's
    unique id travelling through jax's coordination key-value store; then preloads the handler."""
    from jax._src.distributed import global_state

    client = global_state.client
    if client is None:
        raise EpConfigError("mori.jax.shmem_init_attr needs jax.distributed.initialize() first")
    if rank == 0:
        unique_id = shmem.shmem_get_unique_id()
        client.key_value_set_bytes(sync_name, bytes(unique_id))
    else:
        unique_id = client.blocking_key_value_get_bytes(sync_name, timeout_ms)
    status = shmem.shmem_init_attr(shmem.MORI_SHMEM_INIT_WITH_UNIQUEID, rank, world_size, unique_id)
    handlers.preload_kernels()
    return status


def shmem_finalize() -> None:
    """MORI's: drops jax's compiled programs, closes this process's open mori.jax ops (collective)
    and finalises mori.shmem."""
    jax.clear_caches()
    for op in list(_open_ops):
        op.close()
    gc.collect()
    shmem.shmem_finalize()
