# SPDX-License-Identifier: MIT
"""Slot tables: the names of a kernel's trace points, declared once, numbered deterministically.

A table is a prefix plus groups of slot names, usually a JSON file beside the kernels::

    {"prefix": "MORI_EP",
     "slots": {"dispatch": ["route", "reserve", {"name": "copy_tokens", "doc": "rows to peers"}],
               "combine": ["stage", "accumulate"]}}

Slots are numbered from 0 in declaration order; ``dispatch/copy_tokens`` becomes the C constant
``MORI_EP_SLOT_DISPATCH_COPY_TOKENS`` (see :mod:`mori.viz.codegen`). The table's fingerprint
(:attr:`SlotTable.table_id`) is compiled into the kernel and written into the trace, so a trace
is never read with the names of another table.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mori.viz.errors import SlotTableError
from mori.viz.layout import MAX_SLOTS

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Slot:
    """One trace point: ``id`` is what the device records, ``name`` what traces show."""

    id: int
    group: str
    short_name: str
    doc: str = ""

    @property
    def name(self) -> str:
        return f"{self.group}/{self.short_name}"


def _identifier(what: str, value: Any) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise SlotTableError(f"{what}={value!r} is not a C identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return value


class SlotTable:
    """The numbered slots of one table; see the module docstring for the format."""

    def __init__(self, prefix: str, groups: Mapping[str, Sequence[str | Mapping[str, str]]]) -> None:
        self.prefix = _identifier("prefix", prefix)
        if not isinstance(groups, Mapping) or not groups:
            raise SlotTableError(f"slots={groups!r} must be a non-empty mapping of group -> list of slot names")
        slots: list[Slot] = []
        c_names: dict[str, str] = {}
        for group, entries in groups.items():
            _identifier("slot group", group)
            if isinstance(entries, str) or not isinstance(entries, Sequence) or not entries:
                raise SlotTableError(f"slots[{group!r}]={entries!r} must be a non-empty list of slot names")
            for entry in entries:
                if isinstance(entry, Mapping):
                    short, doc = entry.get("name"), str(entry.get("doc", ""))
                else:
                    short, doc = entry, ""
                slot = Slot(len(slots), group, _identifier(f"slot name in group {group!r}", short), doc)
                c_name = self.c_name(slot)
                if c_name in c_names:
                    raise SlotTableError(f"slots {c_names[c_name]!r} and {slot.name!r} both become the C name {c_name}")
                c_names[c_name] = slot.name
                slots.append(slot)
        if len(slots) > MAX_SLOTS:
            raise SlotTableError(f"{len(slots)} slots declared; the device records at most {MAX_SLOTS} (16-bit ids)")
        self.slots: tuple[Slot, ...] = tuple(slots)
        self._by_name = {slot.name: slot for slot in slots}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SlotTable:
        """A table from the parsed JSON object (``prefix`` and ``slots``)."""
        if not isinstance(data, Mapping) or set(data) - {"prefix", "slots"} or "slots" not in data:
            raise SlotTableError(f"a slot table is an object with keys 'prefix' and 'slots', not {data!r}")
        return cls(data.get("prefix", "MORI"), data["slots"])

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> SlotTable:
        """A table from a JSON file."""
        source = Path(path)
        try:
            data = json.loads(source.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SlotTableError(f"cannot read slot table {str(source)!r}: {exc}") from None
        return cls.from_dict(data)

    def c_name(self, slot: Slot) -> str:
        """The C constant of ``slot``: PREFIX_SLOT_GROUP_NAME."""
        return f"{self.prefix}_SLOT_{slot.group}_{slot.short_name}".upper()

    @property
    def table_id(self) -> int:
        """A nonzero 32-bit fingerprint of the prefix and every (id, name): what the kernel records."""
        text = self.prefix + "\n" + "".join(f"{slot.id} {slot.name}\n" for slot in self.slots)
        value = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
        return value or 1  # 0 means "no table" in the buffer

    def names(self) -> dict[int, str]:
        """id -> ``group/name``."""
        return {slot.id: slot.name for slot in self.slots}

    def id(self, name: str) -> int:
        """The id of ``group/name``."""
        try:
            return self._by_name[name].id
        except KeyError:
            raise SlotTableError(f"slot {name!r} is not in table {self.prefix} ({len(self.slots)} slots)") from None

    def to_dict(self) -> dict[str, Any]:
        groups: dict[str, list[Any]] = {}
        for slot in self.slots:
            groups.setdefault(slot.group, []).append(
                {"name": slot.short_name, "doc": slot.doc} if slot.doc else slot.short_name
            )
        return {"prefix": self.prefix, "slots": groups}

    def __len__(self) -> int:
        return len(self.slots)

    def __repr__(self) -> str:
        return f"SlotTable(prefix={self.prefix!r}, slots={len(self.slots)}, table_id=0x{self.table_id:08x})"


SlotMap = SlotTable | Mapping[int, str] | Mapping[str, int] | type[enum.Enum] | None


def resolve_slot_map(slot_map: SlotMap) -> tuple[dict[int, str], int | None]:
    """(id -> name, the table fingerprint if known) for any accepted ``slot_map``: a SlotTable, a
    dict id -> name or name -> id, an Enum class (member name -> int value), or None."""
    if slot_map is None:
        return {}, None
    if isinstance(slot_map, SlotTable):
        return slot_map.names(), slot_map.table_id
    if isinstance(slot_map, type) and issubclass(slot_map, enum.Enum):
        return {int(member.value): member.name for member in slot_map}, None
    if isinstance(slot_map, Mapping):
        names: dict[int, str] = {}
        for key, value in slot_map.items():
            if isinstance(key, int) and isinstance(value, str):
                names[key] = value
            elif isinstance(key, str) and isinstance(value, int):
                names[value] = key
            else:
                raise SlotTableError(
                    f"slot_map entry {key!r}: {value!r} is neither id -> name (int: str) nor name -> id (str: int)"
                )
        return names, None
    raise SlotTableError(f"slot_map has type {type(slot_map).__name__}; expected a SlotTable, a dict or an Enum class")


def slot_name(names: Mapping[int, str], slot: int) -> str:
    """The display name of ``slot``: its table name, else ``slot <id>``."""
    return names.get(slot, f"slot {slot}")
