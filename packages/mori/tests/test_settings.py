# SPDX-License-Identifier: MIT
"""mori.settings: typed reads, invalid values, override() (nesting, threads, tasks) and the registries
the installed packages declare."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from types import MappingProxyType

import pytest

from mori.errors import MoriError, SettingError
from mori.settings import NativeRegistry, Registry, Setting, _registry, override, registries, shared


class _TestConfigError(SettingError):
    """Stands for a package's config error class."""


def _parse_even(text: str) -> int:
    value = int(text)
    if value % 2:
        raise ValueError("expected an even number")
    return value


REGISTRY = Registry(
    "mori-settings-test",
    (
        Setting("MORI_TEST_INT", int, 8, "an int in [1, 64]", low=1, high=64),
        Setting("MORI_TEST_FLOAT", float, 2.5, "seconds, >= 0", low=0),
        Setting("MORI_TEST_BOOL", bool, "1", "a switch, declared by its text"),
        Setting("MORI_TEST_SIZE", "size", "4M", "bytes"),
        Setting("MORI_TEST_CHOICE", "choice", "polling", "a mode", choices=("polling", "EVENT")),
        Setting("MORI_TEST_PATH", Path, "", "a directory"),
        Setting("MORI_TEST_TEXT", str, "hello", "free text"),
        Setting("MORI_TEST_EVEN", "even", "2", "a type of the package's own", parse=_parse_even),
    ),
    error=_TestConfigError,
)


@pytest.fixture(autouse=True)
def _no_test_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for setting in REGISTRY:
        monkeypatch.delenv(setting.name, raising=False)


def test_defaults_are_typed() -> None:
    got = {s.name: REGISTRY.get(s.name) for s in REGISTRY}
    assert got == {
        "MORI_TEST_INT": 8,
        "MORI_TEST_FLOAT": 2.5,
        "MORI_TEST_BOOL": True,
        "MORI_TEST_SIZE": 4 << 20,
        "MORI_TEST_CHOICE": "polling",
        "MORI_TEST_PATH": "",
        "MORI_TEST_TEXT": "hello",
        "MORI_TEST_EVEN": 2,
    }
    assert all(REGISTRY.source(s.name) == "default" for s in REGISTRY)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("MORI_TEST_INT", " 64 ", 64),
        ("MORI_TEST_FLOAT", "0", 0.0),
        ("MORI_TEST_BOOL", "off", False),
        ("MORI_TEST_BOOL", "YES", True),
        ("MORI_TEST_SIZE", "1G", 1 << 30),
        ("MORI_TEST_CHOICE", "event", "EVENT"),  # matched case-insensitively, returned as declared
        ("MORI_TEST_PATH", "/tmp/x", "/tmp/x"),
        ("MORI_TEST_EVEN", "10", 10),
        ("MORI_TEST_INT", "   ", 8),  # blank is unset
    ],
)
def test_environment_values_are_parsed(monkeypatch: pytest.MonkeyPatch, name: str, text: str, expected: object) -> None:
    monkeypatch.setenv(name, text)
    assert REGISTRY.get(name) == expected
    assert REGISTRY.source(name) == ("default" if not text.strip() else "environment")


@pytest.mark.parametrize(
    ("name", "text", "reason"),
    [
        ("MORI_TEST_INT", "65", "is out of range: must be <= 64"),
        ("MORI_TEST_INT", "0", "is out of range: must be >= 1 and <= 64"),
        ("MORI_TEST_INT", "eight", "does not parse as int"),
        ("MORI_TEST_FLOAT", "-1", "is out of range: must be >= 0"),
        ("MORI_TEST_BOOL", "maybe", "is not a boolean: expected 1/0, true/false, yes/no or on/off"),
        ("MORI_TEST_SIZE", "lots", "does not parse as size: expected bytes such as 4096"),
        ("MORI_TEST_CHOICE", "fifo", "does not parse as choice: expected one of polling, EVENT"),
        ("MORI_TEST_EVEN", "3", "does not parse as even: expected an even number"),
    ],
)
def test_invalid_values_raise_the_package_error_naming_variable_value_and_limit(
    monkeypatch: pytest.MonkeyPatch, name: str, text: str, reason: str
) -> None:
    monkeypatch.setenv(name, text)
    with pytest.raises(_TestConfigError) as caught:
        REGISTRY.get(name)
    assert str(caught.value).startswith(f"{name}={text!r} {reason}")
    assert isinstance(caught.value, (SettingError, MoriError, ValueError))


def test_typed_getters_return_the_value_of_their_type_and_refuse_another(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MORI_TEST_INT", "12")
    monkeypatch.setenv("MORI_TEST_BOOL", "off")
    assert REGISTRY.get_int("MORI_TEST_INT") == 12
    assert REGISTRY.get_int("MORI_TEST_SIZE") == 4 << 20
    assert REGISTRY.get_float("MORI_TEST_FLOAT") == 2.5
    assert REGISTRY.get_bool("MORI_TEST_BOOL") is False
    assert REGISTRY.get_str("MORI_TEST_CHOICE") == "polling"
    with pytest.raises(TypeError, match="MORI_TEST_BOOL is a bool setting, not int"):
        REGISTRY.get_int("MORI_TEST_BOOL")  # bool is an int subclass, but not an int setting
    with pytest.raises(TypeError, match="MORI_TEST_TEXT is a string setting, not float"):
        REGISTRY.get_float("MORI_TEST_TEXT")
    monkeypatch.setenv("MORI_TEST_INT", "65")
    with pytest.raises(_TestConfigError, match="MORI_TEST_INT='65' is out of range"):
        REGISTRY.get_int("MORI_TEST_INT")


def test_every_read_sees_the_current_environment_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """NOTE [converted values]: get() keeps what a value converted to, never the value itself: a
    change of the environment or an override shows at the next read, a bad value raises even
    after a good one was read, and an int given for a bool setting is refused though True == 1."""
    reads = []
    for text in ("16", "16", "32", "", "16"):
        monkeypatch.setenv("MORI_TEST_INT", text)
        reads.append(REGISTRY.get_int("MORI_TEST_INT"))
        with override(MORI_TEST_INT=3):
            reads.append(REGISTRY.get_int("MORI_TEST_INT"))
    assert reads == [16, 3, 16, 3, 32, 3, 8, 3, 16, 3]
    monkeypatch.setenv("MORI_TEST_INT", "65")
    with pytest.raises(_TestConfigError, match="MORI_TEST_INT='65'"):
        REGISTRY.get("MORI_TEST_INT")
    with override(MORI_TEST_BOOL=True):
        assert REGISTRY.get_bool("MORI_TEST_BOOL") is True
    # override() refuses an int for a bool on entry: set the raw int as get() would find it.
    token = _registry._OVERRIDES.set(MappingProxyType({"MORI_TEST_BOOL": 1}))
    try:
        with pytest.raises(_TestConfigError, match="MORI_TEST_BOOL=1"):
            REGISTRY.get("MORI_TEST_BOOL")
    finally:
        _registry._OVERRIDES.reset(token)


def test_an_unregistered_name_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="MORI_TEST_NOPE is not a registered mori-settings-test setting"):
        REGISTRY.get("MORI_TEST_NOPE")


def test_a_bad_declaration_is_refused() -> None:
    with pytest.raises(TypeError, match="default 'x'"):
        Setting("MORI_TEST_BAD", int, "x", "")
    with pytest.raises(TypeError, match="needs choices"):
        Setting("MORI_TEST_BAD", "choice", "a", "")
    with pytest.raises(TypeError, match=r"must derive from mori\.errors\.SettingError"):
        Registry("mori-bad", (), error=ValueError)  # type: ignore[arg-type]


def test_override_nests_wins_over_the_environment_and_never_writes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MORI_TEST_INT", "16")
    before = dict(os.environ)
    with override(MORI_TEST_INT=32, MORI_TEST_BOOL=False):
        assert (REGISTRY.get("MORI_TEST_INT"), REGISTRY.get("MORI_TEST_BOOL")) == (32, False)
        assert REGISTRY.source("MORI_TEST_INT") == "override"
        with override({"MORI_TEST_INT": "48"}):  # text, parsed as the environment's would be
            assert REGISTRY.get("MORI_TEST_INT") == 48
            assert REGISTRY.get("MORI_TEST_BOOL") is False  # the outer override still holds
        assert REGISTRY.get("MORI_TEST_INT") == 32
        with override(MORI_TEST_INT=None):  # None: unset, the default even though the environment sets it
            assert REGISTRY.get("MORI_TEST_INT") == 8
        assert dict(os.environ) == before
    assert REGISTRY.get("MORI_TEST_INT") == 16


def test_override_checks_values_on_entry() -> None:
    with pytest.raises(_TestConfigError, match="MORI_TEST_INT=100 is out of range"), override(MORI_TEST_INT=100):
        pytest.fail("entered with an invalid value")
    with (
        pytest.raises(_TestConfigError, match="MORI_TEST_INT=True is a bool, expected int"),
        override(MORI_TEST_INT=True),
    ):
        pass
    with (
        pytest.raises(SettingError, match="MORI_TEST_UNKNOWN is not a registered mori setting"),
        override(MORI_TEST_UNKNOWN=1),
    ):
        pass
    assert REGISTRY.source("MORI_TEST_INT") == "default"  # nothing leaked from the refused blocks


def test_override_is_per_thread() -> None:
    barrier = threading.Barrier(3)
    seen: dict[str, list[int]] = {}

    def worker(label: str, value: int | None) -> None:
        if value is None:
            barrier.wait()
            barrier.wait()
            seen[label] = [REGISTRY.get("MORI_TEST_INT")]  # type: ignore[list-item]
            return
        with override(MORI_TEST_INT=value):
            barrier.wait()  # all three are inside their blocks at once
            first = REGISTRY.get("MORI_TEST_INT")
            barrier.wait()
            seen[label] = [first, REGISTRY.get("MORI_TEST_INT")]  # type: ignore[list-item]

    threads = [threading.Thread(target=worker, args=args) for args in (("a", 3), ("b", 5), ("plain", None))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert seen == {"a": [3, 3], "b": [5, 5], "plain": [8]}


def test_override_is_per_asyncio_task() -> None:
    async def task(value: int, gate: asyncio.Event, other: asyncio.Event) -> int:
        with override(MORI_TEST_INT=value):
            gate.set()
            await other.wait()  # the other task is inside its own block now
            return REGISTRY.get("MORI_TEST_INT")  # type: ignore[return-value]

    async def main() -> list[int]:
        first, second = asyncio.Event(), asyncio.Event()
        return list(await asyncio.gather(task(4, first, second), task(6, second, first)))

    assert asyncio.run(main()) == [4, 6]


def test_entries_report_value_source_and_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MORI_TEST_SIZE", "2M")
    monkeypatch.setenv("MORI_TEST_CHOICE", "fifo")
    with override(MORI_TEST_TEXT="from a test"):
        by_name = {entry.name: entry for entry in REGISTRY.entries()}
    assert (by_name["MORI_TEST_SIZE"].value, by_name["MORI_TEST_SIZE"].source) == ("2M", "environment")
    assert by_name["MORI_TEST_SIZE"].default == "4M" and by_name["MORI_TEST_SIZE"].error is None
    assert (by_name["MORI_TEST_TEXT"].value, by_name["MORI_TEST_TEXT"].source) == ("from a test", "override")
    assert by_name["MORI_TEST_CHOICE"].error == (
        "MORI_TEST_CHOICE='fifo' does not parse as choice: expected one of polling, EVENT"
    )
    assert by_name["MORI_TEST_INT"].source == "default" and by_name["MORI_TEST_INT"].value == "8"


def test_a_native_registry_lists_and_checks_through_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    # A library stands for itself here: its entries and its check are what it reports.
    rows = [("MORI_TEST_NATIVE", "int", "3", "a native int", "3"), ("MORI_LOG_LEVEL", "choice", "WARNING", "", "")]
    native = NativeRegistry(
        "mori-native-test",
        lambda: rows,
        check=lambda name: "refused by the library" if name == "MORI_TEST_NATIVE" else None,
        exclude=shared.REGISTRY.names(),
    )
    assert native.names() == ["MORI_TEST_NATIVE"]  # the shared one is listed under mori only
    assert native.text("MORI_LOG_LEVEL") == ""  # but the library's own reading of it is still there
    (entry,) = native.entries()
    assert entry.native and entry.error == "refused by the library"
    with pytest.raises(SettingError, match="read by mori-native-test's native library"), override(MORI_TEST_NATIVE="4"):
        pass


def test_every_installed_package_declares_its_settings_with_the_mechanism() -> None:
    from importlib.metadata import entry_points

    failures: dict[str, str] = {}
    found = registries(failures)
    declared = {point.name for point in entry_points(group="mori.settings")}
    assert not failures
    assert declared <= set(found) and "mori" in declared
    names = [name for package in declared for name in found[package].names()]
    assert len(names) == len(set(names)), "a variable is declared by two registries"
    for package in declared - {"mori"}:
        registry = found[package]
        assert isinstance(registry, (Registry, NativeRegistry)) and registry.package == package


@pytest.mark.parametrize("package", ["mori-shmem", "mori-cco"])
def test_shared_variables_a_native_library_also_declares_have_one_default(package: str) -> None:
    registry = registries().get(package)
    if registry is None:
        pytest.skip(f"{package} is not installed")
    assert isinstance(registry, NativeRegistry)
    native = {row[0]: row[2] for row in registry._rows(listed_only=False)}
    also = [setting for setting in shared.REGISTRY if setting.name in native]
    assert also, f"{package}'s library declares none of the shared variables"
    for setting in also:
        assert native[setting.name] == setting.default_text, setting.name


def test_every_package_error_root_derives_from_mori_error() -> None:
    import importlib

    roots = {
        "mori.shmem.errors": ("MoriShmemError", "ConfigError"),
        "mori.ep.errors": ("EpError", "EpConfigError"),
        "mori.cco.errors": ("CcoError", None),
        "mori.ir.errors": ("IrError", "IrConfigError"),
        "mori.io.errors": ("MoriIoError", "ConfigError"),
        "mori.umbp.errors": ("UMBPError", "ConfigError"),
        "mori.viz.errors": ("VizError", "ConfigError"),
    }
    for module_name, (root, config) in roots.items():
        module = importlib.import_module(module_name)
        assert issubclass(getattr(module, root), MoriError), module_name
        if config is not None:
            assert issubclass(getattr(module, config), SettingError), module_name
            assert issubclass(getattr(module, config), getattr(module, root)), module_name
    # the builtin bases users catch stay
    from mori.cco.errors import CcoError
    from mori.umbp.errors import ConfigError as UmbpConfigError

    assert issubclass(CcoError, RuntimeError) and issubclass(UmbpConfigError, ValueError)
