# SPDX-License-Identifier: MIT
"""MORI's v2 ``EpDispatchCombineConfig``: field names, order and defaults of
``mori.ops.dispatch_combine_v2``.

The dataclass checks that every field holds a value MORI's v2 accepts (``EpConfigError`` naming
the field, its value and the limit). Whether this build can run a valid config is a separate
question, answered by :func:`unsupported` when an op is created and before anything is allocated
(``EpUnsupportedError``): v2 runs on mori.ep's v1 kernels, so it takes what those support.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mori.ep import inputs
from mori.ep.config import MAX_EXPERTS_PER_TOKEN, check_int, shared_fields
from mori.ep.config import EpDispatchCombineConfig as V1Config
from mori.ep.errors import EpConfigError
from mori.ep.settings import setting

#: MORI's v2 is intranode only, up to 64 PEs.
MAX_WORLD_SIZE = 64
QUANT_TYPES = ("none", "fp8_direct_cast", "fp8_blockwise")
COMBINE_MODES = ("gather", "scatter")
#: Elements per scale block of v2's fp8_blockwise combine (combine_scale_dim = hidden / 128).
FP8_BLOCK = 128
#: The one kernel backend of this build: v1's kernels on mori.shmem's backend (cpu or cuda).
NATIVE_BACKEND = "v1"
KERNEL_BACKENDS = (NATIVE_BACKEND, "flydsl", "hip")
#: Element types MORI's v2 knows that no backend of this build moves (AMD fp8, fp4).
MORI_ONLY_DTYPES = ("float8_e4m3fnuz", "float4_e2m1fn_x2")
#: Geometry MORI fills in for the fields left None once any one of them is pinned.
PINNED_FILL = {"dispatch_block_num": 64, "combine_block_num": 80, "warp_num_per_block": 16,
               "combine_warp_num_per_block": 4}  # fmt: skip
#: Blocks and warps one launch may use (v1's limits: 32 warps are 1024 threads).
MAX_BLOCKS, MAX_WARPS = 65535, 32

#: A schedule bucket: (max tokens inclusive | None = any, dispatch blocks, dispatch warps,
#: combine blocks, combine warps).
Bucket = tuple[int | None, int, int, int, int]


def _bfloat16() -> Any:
    import torch

    return torch.bfloat16


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _itemsize(dtype: Any) -> int:
    import torch

    return int(torch.empty(0, dtype=dtype).element_size())


@dataclass
class EpDispatchCombineConfig:
    """One v2 op's shape and options (MORI's fields; see docs/user-guide/ep.md, "EP v2 API")."""

    rank: int
    world_size: int
    hidden_dim: int
    max_num_inp_token_per_rank: int
    num_experts_per_rank: int
    num_experts_per_token: int
    data_type: Any = field(default_factory=_bfloat16)
    #: Both or neither: an fp8 dispatch with a bf16 combine, for instance.
    dispatch_data_type: Any = None
    combine_data_type: Any = None
    #: Per-token scales, forwarded with the rows as they are (0: none).
    scale_dim: int = 0
    scale_type_size: int = 0
    combine_mode: str = "gather"
    quant_type: str = "none"
    dispatch_block_num: int | None = None
    combine_block_num: int | None = None
    warp_num_per_block: int | None = None
    combine_warp_num_per_block: int | None = None
    schedule: tuple[Bucket, ...] | None = None
    enable_std_moe: bool = False
    #: Receive-row cap (0: world_size * max_num_inp_token_per_rank); rows past it are dropped.
    max_total_recv_tokens: int = 0
    #: None: MORI_V2_KERNEL_BACKEND, else this build's only backend, "v1".
    kernel_backend: str | None = None

    def __post_init__(self) -> None:
        check_int("world_size", self.world_size, 1, MAX_WORLD_SIZE)
        check_int("rank", self.rank, 0, self.world_size - 1)
        check_int("hidden_dim", self.hidden_dim, 1)
        check_int("max_num_inp_token_per_rank", self.max_num_inp_token_per_rank, 1)
        check_int("num_experts_per_rank", self.num_experts_per_rank, 1)
        check_int("num_experts_per_token", self.num_experts_per_token, 1, MAX_EXPERTS_PER_TOKEN)
        check_int("scale_dim", self.scale_dim, 0)
        check_int("scale_type_size", self.scale_type_size, 0, 8)
        check_int("max_total_recv_tokens", self.max_total_recv_tokens, 0)
        if self.scale_dim and not self.scale_type_size:
            raise EpConfigError(f"scale_dim={self.scale_dim} needs scale_type_size > 0")
        self._check_dtypes()
        if self.combine_mode not in COMBINE_MODES:
            raise EpConfigError(f"combine_mode={self.combine_mode!r} is not one of {list(COMBINE_MODES)}")
        if self.quant_type not in QUANT_TYPES:
            raise EpConfigError(f"quant_type={self.quant_type!r} is not one of {list(QUANT_TYPES)}")
        if self.quant_type != "none":
            self.combine_mode = "scatter"  # MORI: the fp8 wire formats are scatter-only
            if self.is_asymmetric_dtype:
                raise EpConfigError(f"quant_type={self.quant_type!r} cannot be combined with dispatch_data_type")
        if self.is_asymmetric_dtype and self.combine_mode != "gather":
            raise EpConfigError(f"combine_mode={self.combine_mode!r}: dispatch_data_type needs combine_mode='gather'")
        if self.fp8_blockwise and self.hidden_dim % FP8_BLOCK:
            raise EpConfigError(
                f"hidden_dim={self.hidden_dim} must be a multiple of {FP8_BLOCK} for quant_type='fp8_blockwise'"
            )
        for name in PINNED_FILL:
            value = getattr(self, name)
            if value is not None:
                check_int(name, value, 1, MAX_WARPS if "warp" in name else MAX_BLOCKS)
        if self.schedule is not None:
            self.schedule = _check_schedule(self.schedule)
        if self.kernel_backend is not None and self.kernel_backend not in KERNEL_BACKENDS:
            raise EpConfigError(f"kernel_backend={self.kernel_backend!r} is not one of {list(KERNEL_BACKENDS)}")

    def _check_dtypes(self) -> None:
        import torch

        if (self.dispatch_data_type is None) != (self.combine_data_type is None):
            raise EpConfigError(
                f"dispatch_data_type={self.dispatch_data_type} and combine_data_type={self.combine_data_type}: "
                "set both or neither"
            )
        for name in ("data_type", "dispatch_data_type", "combine_data_type"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, torch.dtype):
                raise EpConfigError(f"{name}={value!r} must be a torch.dtype")
        if self.is_asymmetric_dtype and dtype_name(self.combine_dtype).startswith("float4"):
            raise EpConfigError(f"combine_data_type={self.combine_data_type}: MORI rejects an fp4 combine")
        # v1 moves rows in 16-byte units and sums them 8 elements at a time.
        for name, dtype in (("dispatch", self.dispatch_dtype), ("combine", self.combine_dtype)):
            nbytes = self.hidden_dim * _itemsize(dtype) // (2 if dtype_name(dtype).startswith("float4") else 1)
            if nbytes % 16:
                raise EpConfigError(
                    f"hidden_dim={self.hidden_dim} x {dtype} makes {name} rows of {nbytes} bytes; "
                    "they must be a multiple of 16 bytes"
                )
        if self.hidden_dim % 8:
            raise EpConfigError(f"hidden_dim={self.hidden_dim} must be a multiple of 8 (combine sums 8 elements)")

    # ---- MORI's derived properties -------------------------------------------------------

    @property
    def is_asymmetric_dtype(self) -> bool:
        return self.dispatch_data_type is not None

    @property
    def dispatch_dtype(self) -> Any:
        return self.dispatch_data_type if self.is_asymmetric_dtype else self.data_type

    @property
    def combine_dtype(self) -> Any:
        return self.combine_data_type if self.is_asymmetric_dtype else self.data_type

    @property
    def is_fp8(self) -> bool:
        return dtype_name(self.dispatch_dtype).startswith("float8")

    @property
    def is_fp4(self) -> bool:
        return dtype_name(self.dispatch_dtype).startswith("float4")

    @property
    def dtype_str(self) -> str:
        if self.is_asymmetric_dtype:
            short = "fp4" if self.is_fp4 else "fp8" if self.is_fp8 else dtype_name(self.dispatch_dtype)
            return f"{short}_disp_{_short_name(self.combine_dtype)}_comb"
        return _short_name(self.data_type)

    @property
    def elem_size(self) -> int:
        return _itemsize(self.dispatch_dtype)

    @property
    def token_nbytes(self) -> int:
        return self.hidden_dim // 2 if self.is_fp4 else self.hidden_dim * self.elem_size

    @property
    def combine_token_nbytes(self) -> int:
        return self.hidden_dim * _itemsize(self.combine_dtype)

    @property
    def is_scatter(self) -> bool:
        return self.combine_mode == "scatter"

    @property
    def fp8_direct_cast(self) -> bool:
        return self.quant_type == "fp8_direct_cast"

    @property
    def fp8_blockwise(self) -> bool:
        return self.quant_type == "fp8_blockwise"

    @property
    def combine_scale_dim(self) -> int:
        """Scale blocks per row of the fp8_blockwise combine (0 otherwise)."""
        return self.hidden_dim // FP8_BLOCK if self.fp8_blockwise else 0

    @property
    def wire_elem_size(self) -> int:
        """Bytes per element combine moves: 1 for the fp8 formats."""
        return 1 if self.quant_type != "none" else _itemsize(self.combine_dtype)

    @property
    def max_recv(self) -> int:
        return self.world_size * self.max_num_inp_token_per_rank

    @property
    def effective_max_recv_per_rank(self) -> int:
        if self.max_total_recv_tokens <= 0:
            return self.max_num_inp_token_per_rank
        return min(-(-self.max_total_recv_tokens // self.world_size), self.max_num_inp_token_per_rank)

    @property
    def effective_max_recv(self) -> int:
        """Receive rows of an op (the stride of the routing handle's destination map)."""
        return self.world_size * self.effective_max_recv_per_rank

    @property
    def total_experts(self) -> int:
        return self.world_size * self.num_experts_per_rank

    @property
    def resolved_kernel_backend(self) -> str:
        """``kernel_backend``, else ``MORI_V2_KERNEL_BACKEND``, else "v1"."""
        return self.kernel_backend or str(setting("MORI_V2_KERNEL_BACKEND")).strip().lower() or NATIVE_BACKEND

    @classmethod
    def tuned(cls, **kwargs: Any) -> EpDispatchCombineConfig:
        """MORI's constructor for the tuned geometry; here the geometry fields left None already
        mean v1's (its tuning files under MORI_EP_LAUNCH_CONFIG_MODE=AUTO)."""
        return cls(**kwargs)

    def to_v1_config(self) -> V1Config:
        """The v1 config of the op that does this config's data movement."""
        return V1Config(
            data_type=self.dispatch_dtype,
            **shared_fields(self),
            max_token_type_size=max(_itemsize(self.dispatch_dtype), _itemsize(self.combine_dtype)),
            use_external_inp_buf=True,  # v2's combine always takes the expert output as an argument
            # The fp8 combine formats run as scatter (mori.ep.v2.scatter), never through v1's combine.
            quant_type="none",
        )


def _short_name(dtype: Any) -> str:
    name = dtype_name(dtype)
    return {"bfloat16": "bf16", "float32": "f32", "float16": "f16"}.get(name, name)


def _check_schedule(schedule: Any) -> tuple[Bucket, ...]:
    """A non-empty sequence of 5-int buckets with increasing token bounds; only the last may be None."""
    try:
        buckets = [tuple(bucket) for bucket in schedule]
    except TypeError:
        raise EpConfigError(f"schedule={schedule!r} must be a sequence of 5-tuples") from None
    if not buckets:
        raise EpConfigError("schedule=() must hold at least one bucket (or be None)")
    previous = 0
    for i, bucket in enumerate(buckets):
        if len(bucket) != 5:
            raise EpConfigError(f"schedule[{i}]={bucket!r} must be (max_tokens|None, disp_blocks, disp_warps, "
                                "comb_blocks, comb_warps)")  # fmt: skip
        bound, *geometry = bucket
        if bound is None:
            if i != len(buckets) - 1:
                raise EpConfigError(f"schedule[{i}] has max_tokens=None; only the last bucket may")
        else:
            check_int(f"schedule[{i}][0]", bound, previous + 1)
            previous = bound
        for j, value in enumerate(geometry, start=1):
            check_int(f"schedule[{i}][{j}]", value, 1, MAX_WARPS if j % 2 == 0 else MAX_BLOCKS)
    return tuple(buckets)


def unsupported(config: EpDispatchCombineConfig) -> str | None:
    """Why this build cannot run ``config`` (None if it can); the op raises it as EpUnsupportedError
    before allocating anything, as MORI's backends do."""
    backend = config.resolved_kernel_backend
    if backend != NATIVE_BACKEND:
        source = "kernel_backend" if config.kernel_backend else "MORI_V2_KERNEL_BACKEND"
        if backend not in KERNEL_BACKENDS:
            return f"{source}={backend!r} is not one of {list(KERNEL_BACKENDS)}"
        return (
            f"{source}={backend!r} is one of MORI's AMD kernel backends; this build runs v2 on mori.ep's "
            f"kernels: use kernel_backend=None or {NATIVE_BACKEND!r}"
        )
    if config.enable_std_moe:
        return (
            "enable_std_moe=True: the v2 standard-MoE convert API is not provided; use "
            "mori.ep.EpDispatchCombineOp.dispatch_standard_moe / combine_standard_moe (v1)"
        )
    for name in ("data_type", "dispatch_data_type", "combine_data_type"):
        value = getattr(config, name)
        if value is not None and dtype_name(value) in MORI_ONLY_DTYPES:
            return f"{name}={value} needs AMD hardware conversions; use float8_e4m3fn (or bfloat16)"
    dispatch, combine = dtype_name(config.dispatch_dtype), dtype_name(config.combine_dtype)
    if dispatch not in inputs.DISPATCH_DTYPES:
        field_name = "dispatch_data_type" if config.is_asymmetric_dtype else "data_type"
        return f"{field_name}={config.dispatch_dtype} is not moved here; supported: {list(inputs.DISPATCH_DTYPES)}"
    if combine not in inputs.COMBINE_DTYPES:
        if not config.is_asymmetric_dtype:
            return (
                f"data_type={config.data_type}: combine sums in one of {list(inputs.COMBINE_DTYPES)} here; set "
                f"dispatch_data_type={config.data_type} and combine_data_type=torch.bfloat16"
            )
        return f"combine_data_type={config.combine_data_type} is not one of {list(inputs.COMBINE_DTYPES)}"
    if config.quant_type != "none" and combine != "bfloat16":
        return f"quant_type={config.quant_type!r} compresses bf16 rows; data_type={config.data_type} is not bf16"
    return None
