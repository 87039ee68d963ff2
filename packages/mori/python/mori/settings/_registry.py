# SPDX-License-Identifier: MIT
"""Registries of settings (one per distribution), ``override()``, and discovery of the installed ones.

A value comes from, in order: the innermost ``override()`` of the current thread or asyncio task,
the environment (a non-empty value), the declared default. Nothing here writes ``os.environ``.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, TypeVar

from mori.errors import SettingError
from mori.settings._setting import InvalidValue, Setting

#: The entry-point group a distribution lists its registry in: ``mori-io = "mori.io.settings:REGISTRY"``.
GROUP = "mori.settings"

_T = TypeVar("_T")

_OVERRIDES: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "mori_settings_overrides", default=MappingProxyType({})
)
#: Registries constructed in this process, by distribution name.
_LOADED: dict[str, AnyRegistry] = {}


@dataclass(frozen=True)
class Entry:
    """One setting as ``python -m mori env`` reports it."""

    package: str
    name: str
    type: str
    default: str
    value: str
    source: str  # "override", "environment" or "default"
    doc: str
    error: str | None = None  # why the effective value is invalid; None when it is valid
    native: bool = False  # read by the package's native library (listed through its registry)


class AnyRegistry(Protocol):
    package: str
    native: bool

    def __contains__(self, name: object) -> bool: ...
    def names(self) -> list[str]: ...
    def entries(self) -> list[Entry]: ...


class Registry:
    """The settings one distribution declares; ``get()`` reads them typed and validated.

    ``error`` is the package's config error class (a subclass of :class:`mori.errors.SettingError`),
    so a bad value raises what that package's users already catch. ``shared`` names variables of
    :mod:`mori.settings.shared` the package reads: ``get()`` reads them there (declared once, listed
    under ``mori``) and raises the package's error for a bad value.
    """

    native = False

    def __init__(
        self,
        package: str,
        settings: Iterable[Setting],
        *,
        error: type[SettingError] = SettingError,
        shared: Iterable[str] = (),
    ) -> None:
        if not issubclass(error, SettingError):
            raise TypeError(f"{package}: error={error.__name__} must derive from mori.errors.SettingError")
        self.package = package
        self.error = error
        self._settings = {s.name: s for s in settings}
        # NOTE [converted values]: per name, the last value given (None: the default) and what it
        # converted to. get() is read on every call of a hot path (an RPC's timeout, a batch's key
        # limit) and parsing the text each time was most of its cost; the environment and the
        # overrides are still read on every get(), so a change takes effect at the next one.
        self._converted: dict[str, tuple[object, object]] = {}
        self._shared: dict[str, Setting] = {}
        if shared:
            from mori.settings.shared import REGISTRY as root

            self._shared = {name: root[name] for name in shared}
            twice = set(self._shared) & set(self._settings)
            if twice:
                raise TypeError(f"{package} declares shared settings again: {sorted(twice)}")
        _LOADED[package] = self

    def __iter__(self) -> Iterator[Setting]:
        return iter(self._settings.values())

    def __len__(self) -> int:
        return len(self._settings)

    def __contains__(self, name: object) -> bool:
        return name in self._settings

    def __getitem__(self, name: str) -> Setting:
        try:
            return self._settings[name]
        except KeyError:
            raise KeyError(f"{name} is not a registered {self.package} setting") from None

    def names(self) -> list[str]:
        return list(self._settings)

    def _setting(self, name: str) -> Setting:
        """The declaration of ``name``: the package's own, or a shared one it reads."""
        found = self._shared.get(name)
        return self[name] if found is None else found

    def _given(self, name: str) -> tuple[object | None, str]:
        """The value given for ``name`` (None: not given) and where it came from."""
        self._setting(name)  # refuses an unregistered name
        overrides = _OVERRIDES.get()
        if name in overrides:
            value = overrides[name]
            return (None if value is None or (isinstance(value, str) and not value.strip()) else value), "override"
        text = os.environ.get(name, "")
        return (text, "environment") if text.strip() else (None, "default")

    def source(self, name: str) -> str:
        """ "override", "environment" or "default": where ``name``'s effective value comes from."""
        return self._given(name)[1]

    def is_set(self, name: str) -> bool:
        """True when ``name`` has a value (environment or override), not its default."""
        return self._given(name)[0] is not None

    def text(self, name: str) -> str:
        """The effective value as text: the given value, else the default's text."""
        given, _ = self._given(name)
        return self._setting(name).default_text if given is None else str(given)

    def get(self, name: str) -> object:
        """The typed, validated value of ``name``; an invalid one raises ``self.error`` naming the
        variable, the value and what was expected."""
        given, _ = self._given(name)
        seen = self._converted.get(name)
        # The type is compared too: True == 1, but an int given for a bool setting is refused.
        if seen is not None and type(seen[0]) is type(given) and seen[0] == given:
            return seen[1]
        setting = self._setting(name)
        try:
            value = setting.default_value() if given is None else setting.convert(given)
        except InvalidValue as exc:
            raise self.error(f"{name}={given!r} {exc}") from None
        self._converted[name] = (given, value)
        return value

    def _typed(self, name: str, kind: type[_T]) -> _T:
        value = self.get(name)
        # bool is an int subclass: an int getter must not hand out a bool setting's value.
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise TypeError(f"{name} is a {self._setting(name).kind} setting, not {kind.__name__}")
        return value

    def get_int(self, name: str) -> int:
        """``get(name)`` of an int (or size) setting, typed for callers."""
        return self._typed(name, int)

    def get_float(self, name: str) -> float:
        """``get(name)`` of a float setting, typed for callers."""
        return self._typed(name, float)

    def get_bool(self, name: str) -> bool:
        """``get(name)`` of a bool setting, typed for callers."""
        return self._typed(name, bool)

    def get_str(self, name: str) -> str:
        """``get(name)`` of a str (or choice) setting, typed for callers."""
        return self._typed(name, str)

    def check(self, name: str, value: object) -> None:
        """Raise ``self.error`` if ``value`` is not valid for ``name`` (what ``override()`` checks)."""
        setting = self._setting(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            return
        try:
            setting.convert(value)
        except InvalidValue as exc:
            raise self.error(f"{name}={value!r} {exc}") from None

    def entries(self) -> list[Entry]:
        found = []
        for setting in self:
            error = None
            try:
                self.get(setting.name)
            except SettingError as exc:
                error = str(exc)
            found.append(
                Entry(
                    self.package,
                    setting.name,
                    setting.kind,
                    setting.default_text,
                    self.text(setting.name),
                    self.source(setting.name),
                    setting.doc,
                    error,
                )
            )
        return found


@dataclass(frozen=True)
class NativeSetting:
    """A setting a native library declares (listed through :class:`NativeRegistry`)."""

    name: str
    kind: str
    default: str
    doc: str


class NativeRegistry:
    """A native library's own registry seen through the same interface, so that library stays the
    one reader of its variables. ``entries`` returns (name, type, default, doc, effective text) from
    the library; ``check`` (optional) asks the library whether a variable's value is valid and
    returns why not, or None. ``exclude`` names variables another registry lists (the shared ones
    the root declares, which the library also reads for its C users)."""

    native = True

    def __init__(
        self,
        package: str,
        entries: Callable[[], Iterable[tuple[str, str, str, str, str]]],
        *,
        check: Callable[[str], str | None] | None = None,
        exclude: Iterable[str] = (),
    ) -> None:
        self.package = package
        self._entries = entries
        self._check = check
        self._exclude = frozenset(exclude)
        _LOADED[package] = self

    def _rows(self, *, listed_only: bool = True) -> list[tuple[str, str, str, str, str]]:
        rows = [tuple(row) for row in self._entries()]
        return [row for row in rows if not listed_only or row[0] not in self._exclude]  # type: ignore[misc]

    def __iter__(self) -> Iterator[NativeSetting]:
        return iter([NativeSetting(name, kind, default, doc) for name, kind, default, doc, _ in self._rows()])

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def names(self) -> list[str]:
        return [row[0] for row in self._rows()]

    def text(self, name: str) -> str:
        """The library's effective text of ``name`` (its value if set and non-empty, else the
        default), the shared variables it also reads included."""
        for entry_name, _kind, _default, _doc, value in self._rows(listed_only=False):
            if entry_name == name:
                return value
        raise KeyError(f"{name} is not a registered {self.package} setting")

    get = text

    def is_set(self, name: str) -> bool:
        """True when ``name`` is set to a non-empty value (the library's rule for "not the default")."""
        self.text(name)  # refuses an unregistered name
        return bool(os.environ.get(name))

    def entries(self) -> list[Entry]:
        return [
            Entry(
                self.package,
                name,
                kind,
                default,
                value,
                "environment" if self.is_set(name) else "default",
                doc,
                self._check(name) if self._check is not None else None,
                native=True,
            )
            for name, kind, default, doc, value in self._rows()
        ]


def registries(failures: dict[str, str] | None = None) -> dict[str, AnyRegistry]:
    """Every installed distribution's registry (entry-point group :data:`GROUP`), by distribution
    name, the root's first. A registry that fails to load is left out and, when ``failures`` is
    given, recorded there with the reason."""
    from importlib.metadata import entry_points

    from mori.settings import shared  # noqa: F401  (the root's registry registers itself)

    for point in entry_points(group=GROUP):
        if point.name in _LOADED:
            continue
        try:
            loaded = point.load()
        except Exception as exc:  # a broken install is reported, not fatal to listing the others
            if failures is not None:
                failures[point.name] = f"{type(exc).__name__}: {exc}"
            continue
        _LOADED.setdefault(point.name, loaded)
    return dict(sorted(_LOADED.items(), key=lambda item: (item[0] != "mori", item[0])))


def registry_of(name: str) -> AnyRegistry:
    """The registry that declares ``name`` (loaded ones first, then the installed ones)."""
    for found in (_LOADED, registries()):
        for registry in found.values():
            if name in registry:
                return registry
    raise SettingError(f"{name} is not a registered mori setting of any installed package")


@contextlib.contextmanager
def override(values: Mapping[str, object] | None = None, /, **named: object) -> Iterator[None]:
    """Give settings these values inside the ``with`` block, for this thread or asyncio task only
    (other threads and tasks keep theirs), without writing ``os.environ``. Values are typed
    (``MORI_EP_TIMEOUT=5.0``) or text as in the environment; ``None`` means unset (the default, even
    when the environment sets one). Overrides nest; the inner value wins. A value is checked on
    entry (the package's config error); a variable a native library reads cannot be overridden."""
    given = {**(values or {}), **named}
    for name, value in given.items():
        registry = registry_of(name)
        if not isinstance(registry, Registry):
            raise SettingError(
                f"{name} is read by {registry.package}'s native library from the environment; "
                "set it there (override() reaches Python registries only)"
            )
        registry.check(name, value)
    token = _OVERRIDES.set(MappingProxyType({**_OVERRIDES.get(), **given}))
    try:
        yield
    finally:
        _OVERRIDES.reset(token)
