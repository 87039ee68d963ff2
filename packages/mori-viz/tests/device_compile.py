# SPDX-License-Identifier: MIT
"""CUDA C++ to PTX with NVRTC (through ctypes, the nvidia-cuda-nvrtc wheel) or nvcc, for the
CPU-only tests: mori-viz does not depend on mori-shmem's JIT, so the tests drive the compilers
themselves. Both return PTX text, which the tests inspect for timer reads and stores."""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
from pathlib import Path

ARCH = "90"  # Hopper, mori's first target


class CompileError(RuntimeError):
    pass


def find_nvrtc() -> Path | None:
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(Path(root).glob("cu*/lib/libnvrtc.so.*")):
            if ".alt." not in path.name:
                return path
    for path in sorted(Path("/usr/local/cuda/lib64").glob("libnvrtc.so*")):
        return path
    return None


def find_nvcc() -> str | None:
    return shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file() else None)


def nvrtc_ptx(source: str, include_dirs: list[Path], defines: dict[str, int] | None = None) -> str:
    path = find_nvrtc()
    if path is None:
        raise CompileError("libnvrtc not found")
    for builtins in sorted(path.parent.glob("libnvrtc-builtins.so.*")):
        if ".alt." not in builtins.name:
            ctypes.CDLL(str(builtins))
    lib = ctypes.CDLL(str(path))
    program = ctypes.c_void_p()
    code = lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), b"test.cu", 0, None, None)
    assert code == 0, f"nvrtcCreateProgram: {code}"
    options = [f"-arch=compute_{ARCH}", "-std=c++17", *(f"-I{d}" for d in include_dirs)]
    options += [f"-D{name}={value}" for name, value in (defines or {}).items()]
    encoded = [o.encode() for o in options]
    try:
        result = lib.nvrtcCompileProgram(program, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value + 1)
        lib.nvrtcGetProgramLog(program, log)
        if result != 0:
            raise CompileError(f"NVRTC failed ({result}):\n{log.value.decode(errors='replace')}")
        lib.nvrtcGetPTXSize(program, ctypes.byref(size))
        ptx = ctypes.create_string_buffer(size.value)
        assert lib.nvrtcGetPTX(program, ptx) == 0
        return ptx.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def _nvcc(kind: str, source: str, include_dirs: list[Path], workdir: Path, defines: dict[str, int] | None) -> Path:
    """Builds ``source`` with nvcc into workdir/test.<kind> (kind: ptx or cubin) for sm_ARCH."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise CompileError("nvcc not found")
    src = workdir / "test.cu"
    src.write_text(source)
    out = workdir / f"test.{kind}"
    argv = [nvcc, f"-{kind}", f"-arch=sm_{ARCH}", "-std=c++17", *(f"-I{d}" for d in include_dirs)]
    argv += [f"-D{name}={value}" for name, value in (defines or {}).items()]
    completed = subprocess.run([*argv, "-o", str(out), str(src)], capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise CompileError(f"nvcc failed ({completed.returncode}):\n{completed.stdout}{completed.stderr}")
    return out


def nvcc_ptx(source: str, include_dirs: list[Path], workdir: Path, defines: dict[str, int] | None = None) -> str:
    return _nvcc("ptx", source, include_dirs, workdir, defines).read_text()


def ptx_body(ptx: str) -> str:
    """PTX without comment lines (they hold compiler build ids and file names)."""
    return "\n".join(line for line in ptx.splitlines() if not line.lstrip().startswith("//")).strip()


def nvcc_cubin(source: str, include_dirs: list[Path], workdir: Path, defines: dict[str, int] | None = None) -> bytes:
    """The sm_90 cubin (SASS) nvcc builds from ``source``."""
    return _nvcc("cubin", source, include_dirs, workdir, defines).read_bytes()
