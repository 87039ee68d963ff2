# SPDX-License-Identifier: MIT
"""No silent settings: every environment variable a package registers and every field of its config
dataclasses either takes effect or is listed in docs/user-guide/compatibility.md.

"Takes effect" is checked mechanically: the name is read somewhere in the package's code other than
where it is declared (a variable: outside its registry; a field: outside the module that defines
the class). A setting that nothing reads and that the page does not list fails here, and so does a
page row that names no setting.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO

from mori.settings import registries

COMPAT_PAGE = REPO / "docs" / "user-guide" / "compatibility.md"

#: package -> its config classes (its env registry comes from mori.settings.registries()).
CONFIG_CLASSES: dict[str, list[str]] = {
    "mori-cco": ["mori.cco.communicator:CCODevCommRequirements"],
    "mori-ep": ["mori.ep.config:EpDispatchCombineConfig", "mori.ep.v2.config:EpDispatchCombineConfig"],
    "mori-io": [
        "mori.io.config:IOEngineConfig",
        "mori.io.config:TcpBackendConfig",
        "mori.io.config:RdmaBackendConfig",
        "mori.io.config:XgmiBackendConfig",
        "mori.io.config:FabricBackendConfig",
    ],
    "mori-umbp": [
        "mori.umbp.client.config:UMBPMasterClientConfig",
        "mori.umbp.client.config:UMBPDramConfig",
        "mori.umbp.client.config:UMBPHbmConfig",
        "mori.umbp.client.config:UMBPSsdConfig",
        "mori.umbp.client.config:UMBPEvictionConfig",
        "mori.umbp.client.config:UMBPDistributedConfig",
        "mori.umbp.client.config:UMBPConfig",
        "mori.umbp.master.server:MasterServerConfig",
    ],
}


def _registered_variables(package: str) -> list[str]:
    """The names ``package``'s registry lists (mori.settings; native ones through their adapter)."""
    return registries()[package].names()


def _sources(package: str) -> Iterator[Path]:
    """The package's sources; the root's shared settings are read by every package, so all of them."""
    directories = sorted((REPO / "packages").glob("mori*")) if package == "mori" else [REPO / "packages" / package]
    for directory in directories:
        for sub in ("python", "src", "include"):
            for path in sorted((directory / sub).rglob("*")):
                if path.suffix in (".py", ".cpp", ".hpp", ".h", ".cu", ".cuh") and "tests" not in path.parts:
                    yield path


def _compat_table() -> dict[str, list[list[str]]]:
    """The page's rows: package section -> each row's names (the backticked names of its first cell,
    or the cell itself; a row about an argument says so and gets the suffix " (argument)")."""
    table: dict[str, list[list[str]]] = {}
    section = ""
    for line in COMPAT_PAGE.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            table[section] = []
        elif line.startswith("|") and section and not line.startswith(("| setting", "| ---")):
            cell = line.split("|")[1].strip()
            suffix = " (argument)" if "argument" in cell else ""
            table[section].append([n.split("=")[0].strip() + suffix for n in re.findall(r"`([^`]+)`", cell) or [cell]])
    return table


def _compat_rows() -> dict[str, set[str]]:
    """Package section -> every name its rows list."""
    return {section: {name for row in rows for name in row} for section, rows in _compat_table().items()}


def _config_fields(package: str) -> list[tuple[str, str, str, str]]:
    """(class, field, defining module's path below python/, its source without the class body)."""
    found = []
    for spec in CONFIG_CLASSES.get(package, []):
        module_name, class_name = spec.split(":")
        cls = getattr(importlib.import_module(module_name), class_name)
        module_lines = inspect.getsource(sys.modules[cls.__module__]).splitlines()
        body, first = inspect.getsourcelines(cls)
        rest = "\n".join(module_lines[: first - 1] + module_lines[first - 1 + len(body) :])
        relative = cls.__module__.replace(".", "/") + ".py"
        for field in dataclasses.fields(cls):
            if not field.name.startswith("_"):
                found.append((class_name, field.name, relative, rest))
    return found


def _field_paths(package: str) -> dict[tuple[str, str], set[str]]:
    """(class, field) -> every dotted name a row may use for it: ``Class.field`` and, through nested
    config dataclasses, ``Outer.inner.field`` (MORI's config tree, e.g. ``UMBPConfig.ssd.io.backend``)."""
    paths: dict[tuple[str, str], set[str]] = {}

    def walk(cls: type, prefix: str, seen: tuple[type, ...]) -> None:
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            paths.setdefault((cls.__name__, field.name), set()).add(f"{prefix}.{field.name}")
            hint = hints.get(field.name)
            for inner in (hint, *typing.get_args(hint)):  # X, or X | None
                if dataclasses.is_dataclass(inner) and isinstance(inner, type) and inner not in seen:
                    walk(inner, f"{prefix}.{field.name}", (*seen, inner))

    for spec in CONFIG_CLASSES.get(package, []):
        module_name, class_name = spec.split(":")
        cls = getattr(importlib.import_module(module_name), class_name)
        walk(cls, class_name, (cls,))
    return paths


def _is_listed(names: set[str], listed: set[str]) -> bool:
    """A field is listed by its own row, or (a nested config) when rows list what is inside it."""
    return any(name in listed or any(row.startswith(name + ".") for row in listed) for name in names)


PACKAGES = ["mori", "mori-shmem", "mori-ep", "mori-cco", "mori-ir", "mori-viz", "mori-io", "mori-umbp"]


def _has_registry(package: str) -> bool:
    return package in registries()


@pytest.mark.parametrize("package", PACKAGES)
def test_every_registered_variable_is_read_or_listed(package):
    if not _has_registry(package):
        pytest.skip(f"{package} registers no environment variables")
    listed = _compat_rows().get(package, set())
    texts = {path: path.read_text(errors="replace") for path in _sources(package)}
    silent = []
    for name in _registered_variables(package):
        if name in listed:
            continue
        readers = [p for p, text in texts.items() if name in text and not _declares(text, name)]
        if not readers:
            silent.append(name)
    assert not silent, f"{package}: registered, read nowhere, not in {COMPAT_PAGE.name}: {silent}"


def _declares(text: str, name: str) -> bool:
    """True when every mention of ``name`` in ``text`` is its registry declaration."""
    mentions = text.count(f'"{name}"')
    declarations = len(re.findall(rf'(?:Setting\(|\{{)\s*"{re.escape(name)}"', text))
    return mentions > 0 and mentions == declarations and text.count(name) == mentions


@pytest.mark.parametrize("package", [p for p in PACKAGES if p in CONFIG_CLASSES])
def test_every_config_field_is_read_or_listed(package):
    listed = _compat_rows().get(package, set())
    texts = {path: path.read_text(errors="replace") for path in _sources(package)}
    silent = []
    paths = _field_paths(package)
    for class_name, field, relative, defining_rest in _config_fields(package):
        if field in listed or _is_listed(paths.get((class_name, field), {f"{class_name}.{field}"}), listed):
            continue
        pattern = re.compile(rf"\.{re.escape(field)}\b|\b{re.escape(field)}\s*=|[\"']{re.escape(field)}[\"']")
        others = [text for p, text in texts.items() if not p.as_posix().endswith(relative)]
        if not any(pattern.search(text) for text in [defining_rest, *others]):
            silent.append(f"{class_name}.{field}")
    assert not silent, f"{package}: config fields read nowhere else, not in {COMPAT_PAGE.name}: {silent}"


def test_every_compat_row_names_a_real_setting():
    known: dict[str, set[str]] = {}
    shared_names = set(_registered_variables("mori"))  # the root's shared settings reach every package
    for package in PACKAGES:
        names = set(_registered_variables(package)) if _has_registry(package) else set()
        names |= shared_names
        for (class_name, field), dotted in _field_paths(package).items():
            names |= {field, f"{class_name}.{field}", *dotted}
        known[package] = names
    unknown = {
        package: [row for row in rows if not any(n in known.get(package, set()) or _is_argument(n) for n in row)]
        for package, rows in _compat_table().items()
        if package in known
    }
    assert not any(unknown.values()), f"rows in {COMPAT_PAGE.name} that name no setting: {unknown}"


def _is_argument(name: str) -> bool:
    """Rows may also name a function's argument: ``func(arg=...)``, or a row that says "argument"."""
    return "(" in name or name.endswith(" (argument)")
