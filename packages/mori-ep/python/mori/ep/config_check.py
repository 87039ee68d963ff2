# SPDX-License-Identifier: MIT
"""Every PE of an op must pass the same config (its rank aside): a PE with another expert count,
hidden size or top-k would place rows where no such expert lives, or read past its buffers.

Creating an op exchanges each PE's config fields through mori-shmem's bootstrap (an allgather of a
few hundred bytes) before any symmetric memory is allocated; a difference raises
``EpConfigMismatchError`` on every PE, naming the first differing field and two PEs' values.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import mori.shmem as shmem
from mori.ep.config import EpDispatchCombineConfig
from mori.ep.errors import EpConfigMismatchError

#: Fields that legitimately differ between PEs.
PER_PE_FIELDS = frozenset({"rank"})
#: Bytes every PE's fingerprint takes (JSON padded with spaces): the bootstrap's allgather needs
#: the same size from every PE, whatever the values.
FINGERPRINT_BYTES = 1 << 13
#: Characters kept of each value (a long repr would not fit otherwise; the start names it).
MAX_VALUE_CHARS = 200


def fingerprint(config: EpDispatchCombineConfig, extra: dict[str, Any]) -> dict[str, str]:
    """The fields every PE must agree on, as strings (``data_type`` as torch names it), plus
    ``extra``: settings read from the environment that shape the op's buffers."""
    values = {
        field.name: str(getattr(config, field.name))[:MAX_VALUE_CHARS]
        for field in dataclasses.fields(config)
        if field.name not in PER_PE_FIELDS
    }
    values["kernel_type"] = config.kernel_type.name
    values.update({name: str(value)[:MAX_VALUE_CHARS] for name, value in extra.items()})
    return values


def _encode(values: dict[str, str]) -> bytes:
    text = json.dumps(values, sort_keys=True).encode()
    assert len(text) <= FINGERPRINT_BYTES, "the fields are bounded by MAX_VALUE_CHARS"
    return text.ljust(FINGERPRINT_BYTES)


def _decode(pe: int, blob: bytes) -> dict[str, str]:
    try:
        values = json.loads(blob.decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise EpConfigMismatchError(f"PE {pe} sent a config fingerprint that is not this version's JSON") from None
    if not isinstance(values, dict):
        raise EpConfigMismatchError(f"PE {pe} sent a config fingerprint that is not a JSON object")
    return {str(key): str(value) for key, value in values.items()}


def first_difference(fingerprints: list[dict[str, str]]) -> tuple[str, int, str, int, str] | None:
    """(field, pe_a, value_a, pe_b, value_b) of the first field (in PE 0's order, then the
    others') where two PEs differ, PE a the lowest with one value and PE b the lowest with another;
    None when all agree. Every PE computes the same answer from the same list."""
    names = list(dict.fromkeys(name for values in fingerprints for name in values))
    for name in names:
        first = fingerprints[0].get(name, "<absent>")
        for pe, values in enumerate(fingerprints[1:], start=1):
            value = values.get(name, "<absent>")
            if value != first:
                return name, 0, first, pe, value
    return None


def check_same_config_on_every_pe(config: EpDispatchCombineConfig, extra: dict[str, Any]) -> None:
    """Collective: raises EpConfigMismatchError on every PE unless all PEs' fingerprints agree."""
    mine = _encode({**fingerprint(config, extra), "rank": str(config.rank)})
    gathered = shmem.shmem_bootstrap_allgather(mine)
    if len(gathered) != config.world_size:
        raise EpConfigMismatchError(
            f"world_size={config.world_size}, but {len(gathered)} PEs exchanged configs (mori.shmem runs "
            f"{shmem.shmem_npes()} PEs)"
        )
    fingerprints = [_decode(pe, blob) for pe, blob in enumerate(gathered)]
    for pe, values in enumerate(fingerprints):
        rank = values.pop("rank", None)
        if rank != str(pe):
            raise EpConfigMismatchError(f"mori.shmem's PE {pe} passed a config with rank={rank}")
    difference = first_difference(fingerprints)
    if difference is not None:
        name, pe_a, value_a, pe_b, value_b = difference
        raise EpConfigMismatchError(
            f"PEs passed different EP configs: {name} is {value_a} on PE {pe_a} but {value_b} on PE {pe_b}; "
            "every PE of an op must pass the same config (rank aside)"
        )
