# SPDX-License-Identifier: MIT
"""The native engine's layers (docs/developer-guide/architecture.md): a file under src/<folder>/ may
include files of its own folder and of folders on a lower layer, never of a higher one or of
another folder on its own layer (two backends never include each other)."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

#: Layer of each folder under src/, lowest first. A new folder must be placed here.
LAYERS: dict[str, int] = {
    "core": 0,  # status, errors, memory and remote descriptors, segments, log
    "crypto": 1,  # helpers: HMAC, random
    "net": 2,  # helpers: sockets, the wire protocol (signs with crypto)
    "gpu": 3,  # helpers: CUDA driver, copy kernels, staging buffers (stage from sockets)
    "ucx": 3,  # helpers: UCX loader, context, worker, control channel (over net)
    "backend": 4,  # the Backend interface every transport implements
    "tcp": 5,  # backends
    "p2p": 5,
    "rdma": 5,
    "engine": 6,  # the orchestrator and its route chain
    "python": 7,  # the pybind11 bindings
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
SOURCE_SUFFIXES = {".hpp", ".cpp", ".h", ".cu", ".inc"}


def includes(root: Path) -> list[tuple[str, str]]:
    """(including file relative to root, included path) for every quoted include under root."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.suffix in SOURCE_SUFFIXES and path.is_file():
            for target in INCLUDE.findall(path.read_text(errors="replace")):
                found.append((path.relative_to(root).as_posix(), target))
    return found


def violations(root: Path, layers: dict[str, int]) -> list[str]:
    """Every include that breaks the layering, as 'file -> include (why)'."""
    bad = []
    for source, target in includes(root):
        src_folder = source.split("/", 1)[0]
        dst_folder = target.split("/", 1)[0]
        if src_folder not in layers:
            bad.append(f"{source}: folder {src_folder!r} has no layer in test_layering.LAYERS")
            continue
        if not (root / target).is_file():
            bad.append(f"{source} -> {target} (not a path under src/: includes are written from src/)")
            continue
        if dst_folder == src_folder:
            continue
        if dst_folder not in layers:
            bad.append(f"{source} -> {target}: folder {dst_folder!r} has no layer in test_layering.LAYERS")
        elif layers[dst_folder] >= layers[src_folder]:
            bad.append(
                f"{source} -> {target} ({src_folder} is layer {layers[src_folder]}, "
                f"{dst_folder} layer {layers[dst_folder]}: only lower layers may be included)"
            )
    return bad


def test_every_folder_has_a_layer():
    folders = {p.name for p in SRC.iterdir() if p.is_dir()}
    assert folders - LAYERS.keys() == set(), "place the new folder in LAYERS"
    assert LAYERS.keys() - folders == set(), "LAYERS names a folder src/ no longer has"


def test_no_include_reaches_up_or_sideways():
    assert includes(SRC), "no includes found: is SRC right?"
    assert violations(SRC, LAYERS) == []


def test_the_check_flags_an_upward_and_a_sideways_include(tmp_path):
    # The checker itself, on a tree made for it: core including engine, and tcp including rdma.
    for name, text in {
        "core/a.hpp": '#include "engine/b.hpp"\n',
        "engine/b.hpp": '#include "core/a.hpp"\n',
        "tcp/c.hpp": '#include "rdma/d.hpp"\n',
        "rdma/d.hpp": "",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = violations(tmp_path, LAYERS)
    assert len(found) == 2
    assert found[0].startswith("core/a.hpp -> engine/b.hpp")
    assert found[1].startswith("tcp/c.hpp -> rdma/d.hpp")
