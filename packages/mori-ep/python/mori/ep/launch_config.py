# SPDX-License-Identifier: MIT
"""Launch geometry of dispatch and combine: per-call arguments, the config, or tuning files.

MORI_EP_LAUNCH_CONFIG_MODE=AUTO reads tuning JSON files named like MORI's,
``{arch}_{gpu}_{kernel}_ep{n}_{dispatch|combine}.json`` (``sm90_h200_intranode_ep8_dispatch.json``),
from the directory MORI_EP_TUNING_CONFIG names or the ``tuning_configs`` one shipped in the package. Each file
holds ``{"rules": [...]}``; a rule names ``dtype``, ``num_tokens``, ``hidden_dim``, ``topk``
(combine rules also ``zero_copy`` and ``quant_type``) and the winning ``block_num``,
``warp_per_block`` and ``rdma_block_num``, with the bandwidth it measured. Lookup, as MORI's: the
dtype (and for combine zero_copy and quant_type) must match; among those, the smallest rule with
``num_tokens >= tokens`` (else the largest); ties prefer an exact hidden and top-k, then hidden,
then top-k.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from mori.ep.config import EpDispatchCombineConfig
from mori.ep.errors import EpConfigError, EpInputError
from mori.ep.settings import setting

logger = logging.getLogger("mori.ep")

TUNING_DIR = Path(__file__).resolve().parent / "tuning_configs"
MAX_WARPS_PER_BLOCK = 32


@dataclass(frozen=True)
class LaunchConfig:
    block_num: int
    rdma_block_num: int
    warp_per_block: int


def tuning_file_name(arch: str, gpu: str, kernel: str, world_size: int, phase: str) -> str:
    return f"{arch}_{gpu}_{kernel.lower()}_ep{world_size}_{phase}.json"


def gpu_model_name(device_name: str) -> str:
    """A short model name from the device name: "NVIDIA H200" -> "h200", "NVIDIA H100 80GB HBM3" -> "h100"."""
    match = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", device_name.upper())
    return match.group(1).lower() if match else re.sub(r"[^a-z0-9]+", "", device_name.lower()) or "gpu"


@cache
def _load_rules(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise EpConfigError(f"tuning file {path} cannot be read: {exc}") from None
    rules = data.get("rules") if isinstance(data, dict) else None
    if not isinstance(rules, list):
        raise EpConfigError(f"tuning file {path} has no 'rules' list")
    return rules


def lookup(
    rules: list[dict[str, Any]],
    *,
    dtype: str,
    tokens: int,
    hidden: int,
    topk: int,
    combine_key: tuple[bool, str] | None,
) -> dict[str, Any] | None:
    """The rule MORI's lookup picks, or None when no rule has this dtype (and combine key)."""
    candidates = [
        rule for rule in rules
        if rule.get("dtype") == dtype
        and (combine_key is None or (bool(rule.get("zero_copy")), rule.get("quant_type", "none")) == combine_key)
    ]  # fmt: skip
    if not candidates:
        return None

    def preference(rule: dict[str, Any]) -> int:
        same_hidden, same_topk = rule.get("hidden_dim") == hidden, rule.get("topk", topk) == topk
        return 0 if same_hidden and same_topk else 1 if same_hidden else 2 if same_topk else 3

    sizes = [rule["num_tokens"] for rule in candidates]
    size = min((n for n in sizes if n >= tokens), default=max(sizes))
    sized = [rule for rule in candidates if rule["num_tokens"] == size]
    return min(sized, key=preference)


def resolve(
    config: EpDispatchCombineConfig,
    *,
    phase: str,
    dtype: str,
    tokens: int,
    hidden: int,
    block_num: int,
    warp_per_block: int,
    rdma_block_num: int,
    combine_key: tuple[bool, str] | None = None,
    arch: str = "",
    gpu: str = "",
) -> LaunchConfig:
    """The geometry of one call: AUTO's tuning rule if one applies, else the per-call arguments
    (> 0), else the config's ``block_num`` / ``warp_num_per_block``. ``arch`` / ``gpu`` name the GPU
    the call runs on, whose tuning file AUTO reads ("": no GPU, no tuning file)."""
    tuning_path = tuning_path_for(arch, gpu, config.kernel_type.name, config.world_size, phase) if arch else None
    for name, value, high in (("block_num", block_num, 65535), ("warp_per_block", warp_per_block, MAX_WARPS_PER_BLOCK)):
        if value == 0 or value < -1 or value > high:
            raise EpInputError(f"{name}={value} must be -1 (default) or in [1, {high}]")
    if setting("MORI_EP_LAUNCH_CONFIG_MODE") == "AUTO" and tuning_path is not None:
        rule = lookup(_load_rules(tuning_path), dtype=dtype, tokens=tokens, hidden=hidden,
                      topk=config.num_experts_per_token, combine_key=combine_key)  # fmt: skip
        if rule is not None:
            return LaunchConfig(int(rule["block_num"]), int(rule.get("rdma_block_num", 0)), int(rule["warp_per_block"]))
        logger.debug("no %s tuning rule for dtype %s in %s", phase, dtype, tuning_path)
    return LaunchConfig(
        block_num if block_num > 0 else config.block_num,
        rdma_block_num if rdma_block_num >= 0 else config.rdma_block_num,
        warp_per_block if warp_per_block > 0 else config.warp_num_per_block,
    )


def tuning_dir() -> Path:
    """MORI_EP_TUNING_CONFIG if set (a directory of tuning files), else the shipped directory."""
    explicit = setting("MORI_EP_TUNING_CONFIG")
    if not explicit:
        return TUNING_DIR
    path = Path(explicit)
    if not path.is_dir():
        raise EpConfigError(f"MORI_EP_TUNING_CONFIG={explicit!r} is not a directory")
    return path


def tuning_path_for(arch: str, gpu: str, kernel: str, world_size: int, phase: str) -> Path | None:
    """The tuning file of this GPU, kernel type, EP size and phase, if there is one."""
    path = tuning_dir() / tuning_file_name(arch, gpu, kernel, world_size, phase)
    return path if path.is_file() else None
