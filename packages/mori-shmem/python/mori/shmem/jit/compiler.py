# SPDX-License-Identifier: MIT
"""The two device compilers of the JIT: NVRTC through ctypes, and nvcc as a subprocess.

Both turn one rendered CUDA C++ translation unit into a CUBIN (SASS for one ``sm_XX``), so
loading never JIT-compiles PTX in the driver. NVRTC comes from the ``nvidia-cuda-nvrtc`` wheel
(or a toolkit); nvcc from a CUDA toolkit. ``MORI_JIT_COMPILER`` picks one (auto: NVRTC if found).
"""

from __future__ import annotations

import abc
import ctypes
import ctypes.util
import functools
import importlib.util
import logging
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from mori.shmem.errors import ConfigError
from mori.shmem.jit.errors import JitCompileError, JitCompilerNotFoundError
from mori.shmem.settings import setting

_log = logging.getLogger("mori.shmem.jit")

COMPILER_CHOICES = ("auto", "nvrtc", "nvcc")

# Options every compile gets, before the caller's and MORI_JIT_EXTRA_FLAGS. No --use_fast_math:
# kernels that want it say so, since it changes results (denormals, division, sqrt).
COMMON_OPTIONS = ("-std=c++17", "-lineinfo")

# Toolkit locations searched after CUDA_HOME / CUDA_PATH (tests replace this tuple).
DEFAULT_CUDA_HOMES: tuple[str, ...] = ("/usr/local/cuda",)

_INSTALL_HINT = (
    "install NVRTC with `pip install nvidia-cuda-nvrtc` (CUDA 13; `nvidia-cuda-nvrtc-cu12` for CUDA 12), "
    "or point MORI_JIT_NVCC at an nvcc"
)


class Compiler(abc.ABC):
    """A device compiler: CUDA C++ text in, CUBIN bytes out."""

    kind: str

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """Where it was found (library or executable path)."""

    @property
    @abc.abstractmethod
    def version(self) -> str:
        """Its version, e.g. ``13.0``."""

    @property
    @abc.abstractmethod
    def identity(self) -> str:
        """Text that changes whenever its output may change; part of every cache key."""

    @abc.abstractmethod
    def default_options(self) -> list[str]:
        """Options before the caller's: COMMON_OPTIONS plus this compiler's own."""

    @abc.abstractmethod
    def compile(
        self, text: str, *, source_path: Path, arch: str, options: Sequence[str], include_dirs: Sequence[Path]
    ) -> bytes:
        """Compiles ``text`` (also on disk at ``source_path``) for ``arch``; raises JitCompileError."""

    def describe(self) -> str:
        return f"{self.kind} {self.version} ({self.location})"


def extra_flags() -> list[str]:
    """MORI_JIT_EXTRA_FLAGS, split like a shell would (so quoted values may hold spaces)."""
    return shlex.split(setting("MORI_JIT_EXTRA_FLAGS"))


def _compile_error(
    compiler: Compiler, arch: str, options: Sequence[str], source_path: Path, log: str
) -> JitCompileError:
    return JitCompileError(
        f"{compiler.kind} failed to compile {source_path.name} for {arch} "
        f"(rendered source: {source_path}; options: {' '.join(options)})\n{log.rstrip()}",
        log=log,
        compiler=compiler.describe(),
        options=options,
        source_path=source_path,
    )


# ---------------------------------------------------------------------------------------------
# NVRTC


def _cuda_homes() -> list[Path]:
    # CUDA_HOME / CUDA_PATH belong to the CUDA toolkit, not to mori's registry, so they are read
    # from the environment directly.
    homes = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), *DEFAULT_CUDA_HOMES]
    return [Path(home) for home in dict.fromkeys(homes) if home]


def _soname_major(path: Path) -> int:
    match = re.search(r"\.so\.(\d+)", path.name)
    return int(match.group(1)) if match else 0


def nvrtc_candidates() -> list[Path]:
    """Where libnvrtc may be, best first: the pip wheels, then toolkits."""
    found: list[Path] = []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        # nvidia-cuda-nvrtc 13.x installs nvidia/cu13/lib/libnvrtc.so.13; the 12.x wheel
        # (nvidia-cuda-nvrtc-cu12) nvidia/cuda_nvrtc/lib/libnvrtc.so.12.
        for pattern in ("cu*/lib/libnvrtc.so.*", "cuda_nvrtc/lib/libnvrtc.so.*"):
            found.extend(path for path in Path(root).glob(pattern) if ".alt." not in path.name)
    found.sort(key=_soname_major, reverse=True)
    for home in _cuda_homes():
        found.extend(sorted(Path(home, "lib64").glob("libnvrtc.so*"), key=_soname_major, reverse=True))
    system = ctypes.util.find_library("nvrtc")
    if system:
        found.append(Path(system))
    return list(dict.fromkeys(found))


class _NvrtcLibrary:
    """libnvrtc with the prototypes used here."""

    def __init__(self, path: Path) -> None:
        # libnvrtc dlopens libnvrtc-builtins by soname at the first compile; the wheels set no
        # RPATH for it, so the copy beside libnvrtc is loaded first and that dlopen finds it.
        for builtins in sorted(path.parent.glob("libnvrtc-builtins.so.*")):
            if ".alt." not in builtins.name:
                ctypes.CDLL(str(builtins))
        lib = ctypes.CDLL(str(path))
        c_int_p, c_size_p = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t)
        c_char_pp = ctypes.POINTER(ctypes.c_char_p)
        prototypes: dict[str, tuple[object, ...]] = {
            "nvrtcVersion": (c_int_p, c_int_p),
            "nvrtcCreateProgram": (
                ctypes.POINTER(ctypes.c_void_p),
                ctypes.c_char_p,
                ctypes.c_char_p,
                ctypes.c_int,
                c_char_pp,
                c_char_pp,
            ),
            "nvrtcCompileProgram": (ctypes.c_void_p, ctypes.c_int, c_char_pp),
            "nvrtcGetProgramLogSize": (ctypes.c_void_p, c_size_p),
            "nvrtcGetProgramLog": (ctypes.c_void_p, ctypes.c_char_p),
            "nvrtcGetCUBINSize": (ctypes.c_void_p, c_size_p),
            "nvrtcGetCUBIN": (ctypes.c_void_p, ctypes.c_char_p),
            "nvrtcDestroyProgram": (ctypes.POINTER(ctypes.c_void_p),),
        }
        for name, argtypes in prototypes.items():
            function = getattr(lib, name)
            function.argtypes = argtypes
            function.restype = ctypes.c_int
        lib.nvrtcGetErrorString.argtypes = (ctypes.c_int,)
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        self.lib = lib
        self.path = path
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check("nvrtcVersion", lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)))
        self.version = (major.value, minor.value)

    def error(self, code: int) -> str:
        text = self.lib.nvrtcGetErrorString(code)
        return (text or b"unknown NVRTC error").decode()

    def check(self, function: str, code: int) -> None:
        if code != 0:
            raise RuntimeError(f"{function} failed: {self.error(code)} ({code})")


@functools.cache
def _open_nvrtc(path: Path) -> _NvrtcLibrary:
    return _NvrtcLibrary(path)


class NvrtcCompiler(Compiler):
    """NVRTC, loaded with ctypes; it produces CUBIN directly (``nvrtcGetCUBIN``) for ``sm_XX``."""

    kind = "nvrtc"

    def __init__(self, library: _NvrtcLibrary) -> None:
        self._nvrtc = library

    @property
    def location(self) -> str:
        return str(self._nvrtc.path)

    @property
    def version(self) -> str:
        return "{}.{}".format(*self._nvrtc.version)

    @property
    def identity(self) -> str:
        # The library's size stands in for its patch level (nvrtcVersion only gives major.minor)
        # without hashing 100 MB; its path is left out so every environment shares the cache.
        size = Path(self._nvrtc.path).stat().st_size
        return f"nvrtc {self.version} {self._nvrtc.path.name} {size}"

    def default_options(self) -> list[str]:
        return list(COMMON_OPTIONS)

    def toolkit_include_dirs(self) -> list[Path]:
        """Headers NVRTC does not carry itself (cuda_fp16.h, cuda/std/...): the include directory
        beside the NVRTC wheel (filled by nvidia-cuda-runtime and nvidia-cuda-cccl), else a
        toolkit's. NVRTC has no built-in copy of them."""
        candidates = [self._nvrtc.path.parent.parent / "include", *(home / "include" for home in _cuda_homes())]
        for path in candidates:
            if (path / "cuda_fp16.h").is_file():
                # CUDA 13 toolkits keep libcu++ (cuda/std/...) in include/cccl.
                return [path, *([path / "cccl"] if (path / "cccl").is_dir() else [])]
        return []

    def compile(
        self, text: str, *, source_path: Path, arch: str, options: Sequence[str], include_dirs: Sequence[Path]
    ) -> bytes:
        lib = self._nvrtc.lib
        all_options = [
            f"-arch={arch}",
            *options,
            *(f"-I{path}" for path in include_dirs),
            *(f"-I{path}" for path in self.toolkit_include_dirs()),
        ]
        program = ctypes.c_void_p()
        code = lib.nvrtcCreateProgram(ctypes.byref(program), text.encode(), source_path.name.encode(), 0, None, None)
        self._nvrtc.check("nvrtcCreateProgram", code)
        try:
            encoded = [option.encode() for option in all_options]
            argv = (ctypes.c_char_p * len(encoded))(*encoded)
            result = lib.nvrtcCompileProgram(program, len(encoded), argv)
            log_size = ctypes.c_size_t()
            self._nvrtc.check("nvrtcGetProgramLogSize", lib.nvrtcGetProgramLogSize(program, ctypes.byref(log_size)))
            log_buffer = ctypes.create_string_buffer(log_size.value + 1)
            self._nvrtc.check("nvrtcGetProgramLog", lib.nvrtcGetProgramLog(program, log_buffer))
            log = log_buffer.value.decode(errors="replace")
            if result != 0:
                raise _compile_error(self, arch, all_options, source_path, f"{log}\n{self._nvrtc.error(result)}")
            if log.strip():
                _log.debug("nvrtc log for %s:\n%s", source_path.name, log)
            size = ctypes.c_size_t()
            self._nvrtc.check("nvrtcGetCUBINSize", lib.nvrtcGetCUBINSize(program, ctypes.byref(size)))
            if size.value == 0:
                # A virtual target (compute_XX) gives PTX only; the JIT always wants SASS.
                raise _compile_error(
                    self, arch, all_options, source_path, f"NVRTC produced no CUBIN for -arch={arch} (need sm_XX)"
                )
            cubin = ctypes.create_string_buffer(size.value)
            self._nvrtc.check("nvrtcGetCUBIN", lib.nvrtcGetCUBIN(program, cubin))
            return cubin.raw
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(program))


def find_nvrtc() -> NvrtcCompiler | None:
    """The first libnvrtc that loads, or None."""
    for path in nvrtc_candidates():
        try:
            return NvrtcCompiler(_open_nvrtc(path))
        except (OSError, RuntimeError, AttributeError) as exc:
            _log.debug("skipping %s: %s", path, exc)
    return None


# ---------------------------------------------------------------------------------------------
# nvcc


@functools.cache
def _nvcc_version_output(path: str, mtime_ns: int) -> str:
    del mtime_ns  # part of the memo key only: a reinstalled nvcc is asked again
    completed = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise JitCompilerNotFoundError(f"{path} --version failed ({completed.returncode}): {completed.stderr.strip()}")
    return completed.stdout.strip()


class NvccCompiler(Compiler):
    """nvcc run as ``nvcc -cubin -arch=sm_XX``."""

    kind = "nvcc"

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def location(self) -> str:
        return str(self.path)

    @property
    def identity(self) -> str:
        return _nvcc_version_output(str(self.path), self.path.stat().st_mtime_ns)

    @property
    def version(self) -> str:
        match = re.search(r"release (\d+\.\d+)", self.identity)
        return match.group(1) if match else "unknown"

    def default_options(self) -> list[str]:
        return [*COMMON_OPTIONS, "-O3"]

    def compile(
        self, text: str, *, source_path: Path, arch: str, options: Sequence[str], include_dirs: Sequence[Path]
    ) -> bytes:
        del text  # nvcc reads the rendered file, which holds the same text
        fd, output_name = tempfile.mkstemp(dir=source_path.parent, prefix=f".{source_path.stem}.", suffix=".nvcc.tmp")
        os.close(fd)
        output = Path(output_name)
        argv = [
            str(self.path),
            "-cubin",
            f"-arch={arch}",
            *options,
            *(f"-I{path}" for path in include_dirs),
            "-o",
            str(output),
            str(source_path),
        ]
        try:
            _log.debug("running %s", shlex.join(argv))
            completed = subprocess.run(argv, capture_output=True, text=True, check=False)
            log = (completed.stdout + completed.stderr).strip()
            if completed.returncode != 0:
                raise _compile_error(self, arch, argv[2:-3], source_path, log)
            if log:
                _log.debug("nvcc output for %s:\n%s", source_path.name, log)
            return output.read_bytes()
        finally:
            output.unlink(missing_ok=True)


def nvcc_candidates() -> list[tuple[str, Path]]:
    """(where it came from, path) of every nvcc to try, in order."""
    found: list[tuple[str, Path]] = []
    for home in _cuda_homes():
        found.append((f"{home}/bin", home / "bin" / "nvcc"))
    on_path = shutil.which("nvcc")
    if on_path:
        found.append(("PATH", Path(on_path)))
    return found


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_nvcc() -> NvccCompiler | None:
    """MORI_JIT_NVCC if set (it must exist), else the first nvcc of ``nvcc_candidates()``."""
    configured = setting("MORI_JIT_NVCC")
    if configured:
        path = Path(configured).expanduser()
        if not _is_executable(path):
            resolved = shutil.which(configured)
            if resolved is None:
                raise JitCompilerNotFoundError(
                    f"MORI_JIT_NVCC={configured!r} is not an executable file; fix or unset it"
                )
            path = Path(resolved)
        return NvccCompiler(path)
    for _where, path in nvcc_candidates():
        if _is_executable(path):
            return NvccCompiler(path)
    return None


# ---------------------------------------------------------------------------------------------
# Choice


def _not_found(choice: str) -> JitCompilerNotFoundError:
    lines = [f"no CUDA device compiler found (MORI_JIT_COMPILER={choice})."]
    if choice in ("auto", "nvrtc"):
        searched = ", ".join(str(path) for path in nvrtc_candidates()) or "none found"
        lines.append(
            "NVRTC: searched site-packages nvidia/cu*/lib and nvidia/cuda_nvrtc/lib, "
            f"$CUDA_HOME/lib64, $CUDA_PATH/lib64, {', '.join(DEFAULT_CUDA_HOMES)} and the linker path "
            f"(candidates: {searched})."
        )
    if choice in ("auto", "nvcc"):
        places = ", ".join(f"{where}" for where, _path in nvcc_candidates()) or "PATH"
        lines.append(f"nvcc: searched MORI_JIT_NVCC (unset), {places} and PATH.")
    lines.append(f"To fix: {_INSTALL_HINT}.")
    return JitCompilerNotFoundError(" ".join(lines))


def compiler_choice(choice: str | None = None) -> str:
    """``choice`` or MORI_JIT_COMPILER, validated."""
    value = (choice if choice is not None else setting("MORI_JIT_COMPILER")).strip().lower()
    if value not in COMPILER_CHOICES:
        source = "compiler" if choice is not None else "MORI_JIT_COMPILER"
        raise ConfigError(f"{source}={value!r} is not valid: expected one of {', '.join(COMPILER_CHOICES)}")
    return value


def find_compiler(choice: str | None = None) -> Compiler:
    """The compiler to use: ``choice`` (or MORI_JIT_COMPILER) of auto, nvrtc, nvcc.

    Raises ``JitCompilerNotFoundError`` saying what was searched when none is found.
    """
    value = compiler_choice(choice)
    if value in ("auto", "nvrtc"):
        nvrtc = find_nvrtc()
        if nvrtc is not None:
            return nvrtc
    if value in ("auto", "nvcc"):
        nvcc = find_nvcc()
        if nvcc is not None:
            return nvcc
    raise _not_found(value)
