# SPDX-License-Identifier: MIT
"""One setting's declaration and how its text becomes a typed, validated value."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: The type names a setting may declare (``parse=`` adds a type of the package's own, e.g. "hex").
TYPES = ("string", "int", "float", "bool", "choice", "path", "size")
_PYTHON_TYPES: dict[type, str] = {str: "string", int: "int", float: "float", bool: "bool", Path: "path"}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


class InvalidValue(ValueError):
    """Why a value is refused, worded to follow ``NAME='value'`` (the registry adds those and
    raises its package's error class)."""


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise InvalidValue("is not a boolean: expected 1/0, true/false, yes/no or on/off")


def parse_size(text: str) -> int:
    """Bytes from ``4096``, ``512K``, ``64M``, ``1G``, ``2TiB`` (binary units)."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError("expected bytes such as 4096, 512K, 64M or 1G")
    return int(match.group(1)) << (10 * " kmgt".index((match.group(2) or " ").lower()))


def _type_name(declared: str | type) -> str:
    if isinstance(declared, type):
        if declared not in _PYTHON_TYPES:
            raise TypeError(f"a setting's type is one of {', '.join(TYPES)} (or str/int/float/bool/Path)")
        return _PYTHON_TYPES[declared]
    return declared


@dataclass(frozen=True)
class Setting:
    """One environment variable: name, type, default, doc and validation.

    ``type`` is one of :data:`TYPES` (or ``str``/``int``/``float``/``bool``/``Path``); ``choices``
    (for "choice") are matched case-insensitively and returned as declared; ``low``/``high`` bound
    numbers (inclusive); ``parse`` replaces the type's parser (text -> value, raising ``ValueError``
    that says what was expected) for a type of the package's own, named by ``type``. ``default`` is
    either a value of the type or the text a user would set (``"4G"`` for a size); an empty text or
    an unset variable means the default.
    """

    name: str
    type: str | type
    default: object
    doc: str
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    parse: Callable[[str], object] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", _type_name(self.type))
        if self.parse is None and self.type not in TYPES:
            raise TypeError(f"{self.name}: type {self.type!r} needs parse= (built-in types: {', '.join(TYPES)})")
        if self.type == "choice" and self.parse is None and not self.choices:
            raise TypeError(f"{self.name}: a choice needs choices=")
        try:
            self.default_value()
        except InvalidValue as exc:
            raise TypeError(f"{self.name}: default {self.default!r} {exc}") from None

    @property
    def kind(self) -> str:
        """The type's name (what ``env`` prints)."""
        assert isinstance(self.type, str)
        return self.type

    @property
    def default_text(self) -> str:
        return self.default if isinstance(self.default, str) else str(self.default)

    def default_value(self) -> object:
        """The typed default; an empty text default stays "" (a choice or parsed type with no default)."""
        if self.default == "":
            return ""
        return self.convert(self.default)

    def convert(self, value: object) -> object:
        """The typed value of ``value`` (the text of an environment variable, or a value given to
        ``override()``); raises :class:`InvalidValue` saying what is wrong."""
        if isinstance(value, str):
            result = self._from_text(value)
        elif self.parse is not None or self.type in ("choice", "path"):
            result = self._from_text(str(value))
        else:
            result = self._from_value(value)
        self._check_range(result)
        return result

    def _from_text(self, text: str) -> object:
        if self.parse is not None:
            try:
                return self.parse(text)
            except InvalidValue:
                raise
            except ValueError as exc:
                raise InvalidValue(f"does not parse as {self.type}: {exc}") from None
        if self.type in ("string", "path"):
            return text
        if self.type == "bool":
            return parse_bool(text)
        if self.type == "choice":
            for choice in self.choices:
                if choice.lower() == text.strip().lower():
                    return choice
            raise InvalidValue(f"does not parse as choice: expected one of {', '.join(self.choices)}")
        parsers: dict[str, Callable[[str], object]] = {"int": int, "float": float, "size": parse_size}
        parser = parsers[self.kind]
        try:
            return parser(text.strip())
        except ValueError as exc:
            raise InvalidValue(f"does not parse as {self.type}: {exc}") from None

    def _from_value(self, value: object) -> object:
        wanted: tuple[type, ...] = {"bool": (bool,), "int": (int,), "size": (int,), "float": (int, float)}[self.kind]
        if not isinstance(value, wanted) or (self.type != "bool" and isinstance(value, bool)):
            raise InvalidValue(f"is a {type(value).__name__}, expected {self.type}")
        return float(value) if self.type == "float" else value  # type: ignore[arg-type]

    def _check_range(self, value: object) -> None:
        if self.low is None and self.high is None:
            return
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return
        if self.low is not None and value < self.low:
            raise InvalidValue(f"is out of range: must be >= {_number(self.low)}{_up_to(self.high)}")
        if self.high is not None and value > self.high:
            raise InvalidValue(f"is out of range: must be <= {_number(self.high)}")


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _up_to(high: float | None) -> str:
    return "" if high is None else f" and <= {_number(high)}"
