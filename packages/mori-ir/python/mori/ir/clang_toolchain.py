# SPDX-License-Identifier: MIT
"""Builds the device bitcode with clang: finding a usable clang, compiling, neutralising the target.

Standalone on purpose (no mori imports): meson runs this file as a script when it builds the
wheel, before any mori package is importable from the build tree, and mori.ir.bitcode imports
it at run time.

The bitcode must link into modules made by other LLVM versions for other GPUs, so after clang
compiles the wrappers the IR is made target-neutral: the per-function "target-cpu" /
"target-features" attributes are dropped (they would stop the consumer's inliner, which only
inlines between functions with the same target) and so are the module flags that a consumer sets
with its own values ("nvvm-reflect-ftz" conflicts at link time). The consumer picks the SM and
PTX version when it generates code. The IR text is then assembled to bitcode by the same clang,
since bitcode, unlike text, is readable by every later LLVM.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: clang's CUDA support of the device headers' PTX (scoped atomics, isspacep) is complete from 17 on.
MIN_CLANG_MAJOR = 17
#: The oldest GPU whose PTX the library's inline assembly may use (release/acquire at .sys scope).
BUILD_ARCH = "sm_70"
BITCODE_MAGIC = b"BC\xc0\xde"
_DROPPED_MODULE_FLAGS = ("nvvm-reflect-ftz", "frame-pointer")
_TARGET_ATTRIBUTE = re.compile(r' "target-(?:cpu|features)"="[^"]*"')
_VERSION = re.compile(r"clang version (\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class Clang:
    path: str
    version: tuple[int, int, int]
    banner: str  #: first line of ``clang --version``, part of the cache key

    def describe(self) -> str:
        return f"{self.path} ({'.'.join(map(str, self.version))})"


def probe(path: str) -> Clang | str:
    """A Clang when ``path`` is a clang >= MIN_CLANG_MAJOR with the NVPTX target, else why not."""
    try:
        banner = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
        targets = subprocess.run([path, "-print-targets"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path}: cannot run it ({exc})"
    found = _VERSION.search(banner)
    if found is None:
        return f"{path}: not clang ({banner.strip().splitlines()[:1]})"
    version = (int(found[1]), int(found[2]), int(found[3]))
    if version[0] < MIN_CLANG_MAJOR:
        return f"{path}: clang {version[0]} is older than the {MIN_CLANG_MAJOR} needed"
    if "nvptx64" not in targets:
        return f"{path}: this clang was built without the NVPTX target"
    return Clang(path, version, banner.strip().splitlines()[0])


def candidates() -> list[str]:
    """clang-NN on PATH, newest first, then plain clang."""
    names = [f"clang-{major}" for major in range(30, MIN_CLANG_MAJOR - 1, -1)] + ["clang"]
    return [found for name in names if (found := shutil.which(name))]


def find_clang(explicit: str = "") -> tuple[Clang | None, list[str]]:
    """The clang to use (``explicit`` if given, else the newest usable on PATH) and the reasons the
    others were refused."""
    refused: list[str] = []
    for path in [explicit] if explicit else candidates():
        found = probe(path)
        if isinstance(found, Clang):
            return found, refused
        refused.append(found)
    return None, refused


def neutralise(ir_text: str) -> str:
    """Drops target attributes and the module flags a consumer sets itself (see the module doc)."""
    text = _TARGET_ATTRIBUTE.sub("", ir_text)
    dropped = set()
    for name in _DROPPED_MODULE_FLAGS:
        for node in re.finditer(rf'^(!\d+) = !\{{i32 \d+, !"{re.escape(name)}", [^}}]*\}}$', text, re.M):
            dropped.add(node[1])

    def keep(match: re.Match[str]) -> str:
        ids = [item.strip() for item in match[1].split(",") if item.strip() and item.strip() not in dropped]
        return "!llvm.module.flags = !{" + ", ".join(ids) + "}"

    return re.sub(r"^!llvm\.module\.flags = !\{([^}]*)\}", keep, text, flags=re.M)


def compile_bitcode(
    clang: Clang,
    source: Path,
    prelude: Path,
    include_dirs: list[Path],
    out: Path,
    depfile: Path | None = None,
    defines: tuple[str, ...] = (),
) -> None:
    """source (CUDA C++) -> target-neutral NVPTX bitcode at ``out`` (written whole or not at all).

    ``depfile``: also write the headers it read, in make syntax, for the build system (mori-shmem's
    device headers live outside this project, so only this tells meson to rebuild when they change).
    ``defines``: ``NAME`` or ``NAME=VALUE`` macros for the compile.
    """
    with tempfile.TemporaryDirectory(prefix="mori-ir-") as scratch:
        ir_path, neutral_path = Path(scratch) / "device.ll", Path(scratch) / "neutral.ll"
        cuda = [
            clang.path, "-x", "cuda", "--cuda-device-only", f"--cuda-gpu-arch={BUILD_ARCH}",
            # No CUDA toolkit: the prelude supplies what the headers use, and an installed toolkit
            # of a version this clang does not know must not be picked up.
            "-nocudainc", "-nocudalib", f"--cuda-path={scratch}",
            "-std=c++17", "-O2", "-fno-exceptions", "-include", str(prelude),
            *(f"-I{d}" for d in include_dirs), *(f"-D{d}" for d in defines),
            "-emit-llvm", "-S", "-o", str(ir_path), str(source),
        ]  # fmt: skip
        if depfile is not None:
            cuda[1:1] = ["-MD", "-MF", str(depfile), "-MT", str(out)]
        _run(cuda)
        neutral_path.write_text(neutralise(ir_path.read_text()))
        bitcode_path = Path(scratch) / "device.bc"
        assemble = [clang.path, "--target=nvptx64-nvidia-cuda", "-c", "-emit-llvm", "-o", str(bitcode_path)]
        _run([*assemble, str(neutral_path)])
        data = bitcode_path.read_bytes()
        if not data.startswith(BITCODE_MAGIC):
            raise RuntimeError(f"{clang.path} wrote {bitcode_path} without the bitcode magic")
        out.parent.mkdir(parents=True, exist_ok=True)
        temp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        temp.write_bytes(data)
        os.replace(temp, out)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}\nexited with {done.returncode}:\n{done.stderr.strip()}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("find", help="print the clang that would be used; exit 1 when there is none")
    build = sub.add_parser("build", help="compile the device library to bitcode")
    # Run by the build as a plain script, before mori is installed: it reads the variable itself
    # (mori.ir.settings declares it for the installed package).
    build.add_argument("--clang", default=os.environ.get("MORI_IR_CLANG", ""))
    build.add_argument("--source", type=Path, required=True)
    build.add_argument("--prelude", type=Path, required=True)
    build.add_argument("-I", dest="include_dirs", type=Path, action="append", default=[])
    build.add_argument("--out", type=Path, required=True)
    build.add_argument("--depfile", type=Path, help="write the headers read, for the build system")
    build.add_argument("-D", dest="defines", action="append", default=[], help="NAME[=VALUE] for the compile")
    args = parser.parse_args(argv)
    clang, refused = find_clang(os.environ.get("MORI_IR_CLANG", "") if args.command == "find" else args.clang)
    if clang is None:
        sys.stderr.write("no usable clang: " + ("; ".join(refused) or "none on PATH") + "\n")
        return 1
    if args.command == "find":
        sys.stdout.write(clang.path + "\n")
        return 0
    try:
        defines = tuple(args.defines)
        compile_bitcode(clang, args.source, args.prelude, args.include_dirs, args.out, args.depfile, defines)
    except RuntimeError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
