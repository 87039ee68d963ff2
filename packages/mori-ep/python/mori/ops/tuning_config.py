"""mori.ops.tuning_config: MORI's module of the EP launch-tuning files, over mori.ep.launch_config.

File names follow ``{arch}_{gpu}_{kernel}_ep{n}_{dispatch|combine}.json`` as MORI's do (here the arch
is ``sm90``-style and the kernel name lower case); rules name dtypes by torch's names
(``float8_e4m3fnuz``) rather than MORI's short strings. ``MORI_EP_TUNING_CONFIG`` names a directory
of such files. Lookup is mori.ep.launch_config.lookup, MORI's rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from mori.ep.config import QUANT_TYPES, EpDispatchCombineKernelType, EpDispatchCombineQuantType
from mori.ep.errors import EpConfigError
from mori.ep.launch_config import LaunchConfig, _load_rules, gpu_model_name, lookup, tuning_dir, tuning_file_name

#: MORI's name of the launch triple.
LaunchParams = LaunchConfig


def kernel_type_to_config_str(kernel_type: Any) -> str:
    """'IntraNode', 'InterNodeV1', ... from an enum member or its name."""
    name = getattr(kernel_type, "name", None) or str(kernel_type)
    if name not in EpDispatchCombineKernelType.__members__:
        known = list(EpDispatchCombineKernelType.__members__)
        raise EpConfigError(f"kernel_type={kernel_type!r} is not one of {known}")
    return name


def quant_type_to_config_str(quant_type: Any) -> str:
    """'none', 'fp8_direct_cast', ... from a string or an enum member."""
    if isinstance(quant_type, str):
        key = quant_type.strip().lower()
        key = "none" if key == "none_" else key
        if key in QUANT_TYPES:
            return key
    elif isinstance(quant_type, int):
        member = EpDispatchCombineQuantType(int(quant_type))
        return next(name for name, value in QUANT_TYPES.items() if value == member)
    raise EpConfigError(f"quant_type={quant_type!r} is not one of {list(QUANT_TYPES)}")


def dtype_to_config_str(dtype: Any) -> str:
    """The dtype name rules use: torch's (``torch.bfloat16`` -> 'bfloat16')."""
    return str(dtype).removeprefix("torch.")


def detect_gpu_model() -> str | None:
    """The short model name of CUDA device 0 ('h200'), or None without a GPU."""
    try:
        import torch

        return gpu_model_name(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None
    except (ImportError, RuntimeError):
        return None


def build_config_filename(
    gpu_arch: str, kernel_type: str, ep_size: int, gpu_model: str | None = None, phase: str = "dispatch"
) -> str:
    return tuning_file_name(gpu_arch, gpu_model or "", kernel_type_to_config_str(kernel_type), ep_size, phase)


def config_path_for(
    gpu_arch: str, kernel_type: str, ep_size: int, gpu_model: str | None = None, phase: str = "dispatch"
) -> Path:
    """The file a (GPU, kernel type, EP size, phase) reads, in MORI_EP_TUNING_CONFIG's directory or
    the shipped one (it may not exist)."""
    return tuning_dir() / build_config_filename(gpu_arch, kernel_type, ep_size, gpu_model, phase)


@dataclass
class TuningConfigManager:
    """The dispatch and combine rules of one (GPU, kernel type, EP size), cached per key."""

    dispatch_rules: list[dict[str, Any]]
    combine_rules: list[dict[str, Any]]

    _cache: ClassVar[dict[tuple[str, str, str, int], TuningConfigManager]] = {}

    @classmethod
    def get_instance(
        cls, gpu_arch: str, kernel_type: str, ep_size: int, gpu_model: str | None = None
    ) -> TuningConfigManager:
        key = (gpu_arch, gpu_model or "", kernel_type_to_config_str(kernel_type), ep_size)
        if key not in cls._cache:
            rules = []
            for phase in ("dispatch", "combine"):
                path = config_path_for(gpu_arch, kernel_type, ep_size, gpu_model, phase)
                rules.append(list(_load_rules(path)) if path.is_file() else [])
            cls._cache[key] = cls(rules[0], rules[1])
        return cls._cache[key]

    @staticmethod
    def lookup(
        sorted_rules: list[dict[str, Any]],
        dtype: Any,
        num_tokens: int,
        hidden_dim: int,
        zero_copy: bool | None = None,
        quant_type: str | None = None,
    ) -> LaunchParams | None:
        """The rule MORI's lookup picks (combine: pass zero_copy and quant_type), or None."""
        combine_key = None if zero_copy is None else (bool(zero_copy), quant_type_to_config_str(quant_type or "none"))
        rule = lookup(
            sorted_rules, dtype=dtype_to_config_str(dtype), tokens=num_tokens, hidden=hidden_dim, topk=-1,
            combine_key=combine_key,
        )  # fmt: skip
        if rule is None:
            return None
        return LaunchParams(int(rule["block_num"]), int(rule.get("rdma_block_num", 0)), int(rule["warp_per_block"]))


__all__ = [
    "LaunchParams",
    "TuningConfigManager",
    "build_config_filename",
    "config_path_for",
    "detect_gpu_model",
    "dtype_to_config_str",
    "kernel_type_to_config_str",
    "quant_type_to_config_str",
]
