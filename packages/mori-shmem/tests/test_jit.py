# SPDX-License-Identifier: MIT
"""mori.shmem.jit: compilers, the content-addressed cache, the CLI, and (on a GPU) launches.

The first part needs only a CUDA compiler (CI has nvcc and no GPU): an nvcc wrapper counts the
real compiles so cache hits are proven, not assumed. Tests marked ``gpu`` load and launch the
kernels of gpu_kernels/jit_test_kernels.cu and compare with torch.
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mori.shmem.jit as jit
from mori.shmem.errors import ConfigError, InvalidArgumentError
from mori.shmem.jit import cache, compiler, launch, registry, source
from mori.testing import run_processes

KERNELS = Path(__file__).resolve().parent / "gpu_kernels" / "jit_test_kernels.cu"
ARCH = "sm_90"

BAD_SOURCE = 'extern "C" __global__ void broken(int* out) { int x = ; out[0] = x; }\n'


def _real_nvcc() -> str | None:
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
            return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc")


class CountingNvcc:
    """An nvcc wrapper (MORI_JIT_NVCC) that counts the compiles it forwards to the real nvcc."""

    def __init__(self, directory: Path, real: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.counter = directory / "compiles"
        self.path = directory / "nvcc"
        self.path.write_text(
            f'#!/bin/sh\ncase " $* " in *" -cubin "*) echo run >> "{self.counter}";; esac\nexec "{real}" "$@"\n'
        )
        self.path.chmod(0o755)

    def runs(self) -> int:
        return len(self.counter.read_text().splitlines()) if self.counter.exists() else 0


@pytest.fixture(autouse=True)
def jit_cache(tmp_path, monkeypatch) -> Path:
    """A fresh cache directory per test, and none of the caller's JIT settings."""
    root = tmp_path / "jit-cache"
    monkeypatch.setenv("MORI_JIT_CACHE_DIR", str(root))
    for name in ("MORI_JIT_ARCH", "MORI_JIT_EXTRA_FLAGS", "MORI_JIT_NVCC", "MORI_JIT_COMPILER"):
        monkeypatch.delenv(name, raising=False)
    return root


@pytest.fixture
def nvcc(tmp_path, monkeypatch) -> CountingNvcc:
    real = _real_nvcc()
    if real is None:
        pytest.skip("nvcc not found (no CUDA toolkit: set CUDA_HOME or put nvcc on PATH)")
    wrapper = CountingNvcc(tmp_path / "nvcc-wrapper", real)
    monkeypatch.setenv("MORI_JIT_NVCC", str(wrapper.path))
    monkeypatch.setenv("MORI_JIT_COMPILER", "nvcc")
    return wrapper


@pytest.fixture
def nvrtc(monkeypatch) -> compiler.NvrtcCompiler:
    found = compiler.find_nvrtc()
    if found is None:
        pytest.skip("NVRTC not found (pip install nvidia-cuda-nvrtc for CUDA 13, nvidia-cuda-nvrtc-cu12 for 12)")
    monkeypatch.setenv("MORI_JIT_COMPILER", "nvrtc")
    return found


def _is_cubin(path: Path) -> bool:
    data = path.read_bytes()
    return len(data) > 64 and data.startswith(b"\x7fELF")


# ---------------------------------------------------------------------------------------------
# Compiling and caching (nvcc, no GPU needed)


def test_compile_with_nvcc_writes_cubin_source_and_sidecar(nvcc, jit_cache):
    path = jit.compile(KERNELS, defines={"VALUE_T": "double"}, arch=ARCH)
    assert path.parent == jit_cache / ARCH
    assert path.name.startswith("jit_test_kernels-") and path.suffix == ".cubin"
    assert _is_cubin(path)
    rendered = path.with_suffix(".cu").read_text()
    assert "#define VALUE_T double\n" in rendered
    assert '#line 1 "jit_test_kernels.cu"' in rendered
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["compiler"].startswith("nvcc ")
    assert sidecar["arch"] == ARCH
    assert "-O3" in sidecar["options"] and "--use_fast_math" not in sidecar["options"]
    assert path.name == f"jit_test_kernels-{sidecar['key'][:16]}.cubin"
    assert nvcc.runs() == 1


def test_second_compile_is_a_cache_hit(nvcc):
    first = jit.compile(KERNELS, arch=ARCH)
    before = first.stat()
    second = jit.compile(KERNELS, arch=ARCH)
    after = second.stat()
    assert second == first
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert nvcc.runs() == 1


def test_inline_source_text_compiles(nvcc):
    path = jit.compile('extern "C" __global__ void noop() {}\n', name="inline_noop", arch=ARCH)
    assert path.name.startswith("inline_noop-") and _is_cubin(path)


def test_key_changes_with_defines_options_flags_and_arch(nvcc, monkeypatch):
    base = jit.compile(KERNELS, defines={"VALUE_T": "float"}, arch=ARCH)
    variants = [
        jit.compile(KERNELS, defines={"VALUE_T": "double"}, arch=ARCH),
        jit.compile(KERNELS, defines={"VALUE_T": "float"}, options=["-DEXTRA=1"], arch=ARCH),
        jit.compile(KERNELS, defines={"VALUE_T": "float"}, arch="sm_80"),
    ]
    monkeypatch.setenv("MORI_JIT_EXTRA_FLAGS", "-DFROM_ENV=1")
    variants.append(jit.compile(KERNELS, defines={"VALUE_T": "float"}, arch=ARCH))
    assert len({base, *variants}) == 5
    assert variants[2].parent.name == "sm_80"
    assert nvcc.runs() == 5


def test_define_order_does_not_change_the_key(nvcc):
    first = jit.compile(KERNELS, defines={"A": 1, "B": True, "VALUE_T": "float"}, arch=ARCH)
    second = jit.compile(KERNELS, defines={"VALUE_T": "float", "B": True, "A": 1}, arch=ARCH)
    assert first == second
    assert nvcc.runs() == 1


def test_header_contents_enter_the_key(nvcc, tmp_path):
    include = tmp_path / "include"
    (include / "sub").mkdir(parents=True)
    header = include / "sub" / "coeff.cuh"
    header.write_text("#define COEFF 2\n")
    text = '#include "sub/coeff.cuh"\nextern "C" __global__ void scale(int* out) { out[0] = COEFF; }\n'
    original = jit.compile(text, name="scale", include_dirs=[include], arch=ARCH)
    header.write_text("#define COEFF 3\n")
    changed = jit.compile(text, name="scale", include_dirs=[include], arch=ARCH)
    assert changed != original
    header.write_text("#define COEFF 2\n")
    assert jit.compile(text, name="scale", include_dirs=[include], arch=ARCH) == original
    (include / "unrelated.txt").write_text("not a header")
    assert jit.compile(text, name="scale", include_dirs=[include], arch=ARCH) == original
    assert nvcc.runs() == 2


def test_header_paths_do_not_enter_the_key(nvcc, tmp_path):
    # The same headers in two places (two virtualenvs, say) give the same kernel.
    text = '#include "coeff.cuh"\nextern "C" __global__ void scale(int* out) { out[0] = COEFF; }\n'
    keys = []
    for place in ("a", "b"):
        include = tmp_path / place
        include.mkdir()
        (include / "coeff.cuh").write_text("#define COEFF 2\n")
        keys.append(jit.compile(text, name="scale", include_dirs=[include], arch=ARCH))
    assert keys[0] == keys[1]
    assert nvcc.runs() == 1


def test_render_defines():
    rendered = source.render("int x;\n", name="k", defines={"B": True, "A": -3, "T": "__nv_bfloat16", "F": False})
    assert rendered.text.splitlines()[1:5] == ["#define A -3", "#define B 1", "#define F 0", "#define T __nv_bfloat16"]
    with pytest.raises(InvalidArgumentError, match="not a C identifier"):
        source.render("int x;\n", defines={"1BAD": 1})
    with pytest.raises(InvalidArgumentError, match="several lines"):
        source.render("int x;\n", defines={"X": "1\n#define Y 2"})
    with pytest.raises(InvalidArgumentError, match="expected int, str or bool"):
        source.render("int x;\n", defines={"X": 1.5})  # type: ignore[dict-item]


def test_bad_inputs_are_refused_before_compiling(nvcc, tmp_path):
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        jit.compile(tmp_path / "missing.cu", arch=ARCH)
    with pytest.raises(InvalidArgumentError, match="include directory"):
        jit.compile(KERNELS, include_dirs=[tmp_path / "nowhere"], arch=ARCH)
    with pytest.raises(InvalidArgumentError, match="sm_XX"):
        jit.compile(KERNELS, arch="compute_90")
    with pytest.raises(InvalidArgumentError, match="kernel name"):
        jit.compile(KERNELS, name="../escape", arch=ARCH)
    assert nvcc.runs() == 0


def test_arch_setting_is_used(nvcc, monkeypatch):
    monkeypatch.setenv("MORI_JIT_ARCH", "sm_80")
    assert jit.compile(KERNELS).parent.name == "sm_80"
    monkeypatch.setenv("MORI_JIT_ARCH", "ampere")
    with pytest.raises(InvalidArgumentError, match="MORI_JIT_ARCH"):
        jit.compile(KERNELS)


def test_syntax_error_raises_jit_compile_error_with_the_log(nvcc, jit_cache):
    with pytest.raises(jit.JitCompileError) as caught:
        jit.compile(BAD_SOURCE, name="broken", arch=ARCH)
    error = caught.value
    assert "broken.cu(1): error: expected an expression" in str(error)
    assert "expected an expression" in error.log
    assert error.source_path is not None and error.source_path.read_text().endswith(BAD_SOURCE)
    assert str(error.source_path) in str(error)
    assert not list((jit_cache / ARCH).glob("*.cubin"))
    assert not list((jit_cache / ARCH).glob(".*.tmp"))


def test_unknown_compiler_setting_is_a_config_error(monkeypatch):
    monkeypatch.setenv("MORI_JIT_COMPILER", "clang")
    with pytest.raises(ConfigError, match="MORI_JIT_COMPILER"):
        jit.compile(KERNELS, arch=ARCH)


def test_missing_nvcc_setting_raises_compiler_not_found(monkeypatch, tmp_path):
    monkeypatch.setenv("MORI_JIT_COMPILER", "nvcc")
    monkeypatch.setenv("MORI_JIT_NVCC", str(tmp_path / "no-such-nvcc"))
    with pytest.raises(jit.JitCompilerNotFoundError, match="MORI_JIT_NVCC"):
        jit.compile(KERNELS, arch=ARCH)


def test_no_compiler_at_all_says_what_was_searched_and_how_to_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(compiler, "nvrtc_candidates", list)
    monkeypatch.setattr(compiler, "DEFAULT_CUDA_HOMES", ())
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(jit.JitCompilerNotFoundError) as caught:
        jit.compile(KERNELS, arch=ARCH)
    message = str(caught.value)
    assert "NVRTC" in message and "nvcc" in message
    assert "pip install nvidia-cuda-nvrtc" in message and "MORI_JIT_NVCC" in message


def _compile_in_child(rank: int, nranks: int, barrier) -> tuple[str, str]:
    # Runs in a spawned process: every child asks for the same new kernel at the same moment.
    import hashlib

    import mori.shmem.jit as child_jit

    barrier.wait(timeout=120)
    path = child_jit.compile(KERNELS, defines={"VALUE_T": "double"}, arch=ARCH)
    return str(path), hashlib.sha256(path.read_bytes()).hexdigest()


def test_concurrent_processes_compile_once_and_share_the_cubin(nvcc):
    barrier = multiprocessing.get_context("spawn").Barrier(4)
    answers = run_processes(_compile_in_child, 4, barrier, timeout=240)
    assert len(set(answers)) == 1
    path = Path(answers[0][0])
    assert _is_cubin(path)
    assert nvcc.runs() == 1
    assert not list(path.parent.glob(".*.tmp"))


@pytest.mark.parametrize("damage", [b"", b"\x7fEL", b"not an elf file at all" * 8])
def test_damaged_cubin_is_rebuilt(nvcc, damage):
    path = jit.compile(KERNELS, arch=ARCH)
    good = path.read_bytes()
    path.write_bytes(damage)
    assert jit.compile(KERNELS, arch=ARCH) == path
    assert path.read_bytes() == good
    assert nvcc.runs() == 2


def test_clear_removes_only_cache_files(nvcc, jit_cache):
    jit.compile(KERNELS, arch=ARCH)
    keep = jit_cache / "README.txt"
    keep.write_text("not the cache's")
    files, size = cache.clear()
    assert files >= 4 and size > 0
    assert keep.exists() and not (jit_cache / ARCH).exists()


# ---------------------------------------------------------------------------------------------
# NVRTC


def test_nvrtc_compiles_the_same_kernel(nvrtc, jit_cache):
    path = jit.compile(KERNELS, defines={"VALUE_T": "double"}, arch=ARCH)
    assert _is_cubin(path)
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["compiler"].startswith("nvrtc ")
    assert "-O3" not in sidecar["options"]
    assert jit.compile(KERNELS, defines={"VALUE_T": "double"}, arch=ARCH) == path


def test_nvrtc_reaches_toolkit_headers(nvrtc):
    if not nvrtc.toolkit_include_dirs():
        pytest.skip("no CUDA headers beside NVRTC or in a toolkit (pip install nvidia-cuda-runtime)")
    text = (
        "#include <cuda_bf16.h>\n"
        'extern "C" __global__ void to_bf16(__nv_bfloat16* o) { o[0] = __float2bfloat16(1.f); }\n'
    )
    assert _is_cubin(jit.compile(text, name="bf16", arch=ARCH))


def test_nvrtc_syntax_error(nvrtc):
    with pytest.raises(jit.JitCompileError, match=r"broken\.cu\(1\): error: expected an expression"):
        jit.compile(BAD_SOURCE, name="broken", arch=ARCH)


# ---------------------------------------------------------------------------------------------
# Launch checks (pure Python: they run before anything touches the driver)


@pytest.mark.parametrize(
    ("grid", "block", "match"),
    [
        (0, 32, r"grid=0: extent 0 along x is outside \[1, 2147483647\]"),
        ((1, 70000), 32, r"along y is outside \[1, 65535\]"),
        (2**31, 32, "along x"),
        ((1, 1, 1, 1), 32, "tuple of 1 to 3 ints"),
        ((), 32, "tuple of 1 to 3 ints"),
        ([2, 2.0], 32, "tuple of 1 to 3 ints"),
        (1.5, 32, "tuple of 1 to 3 ints"),
        (True, 32, "tuple of 1 to 3 ints"),
        (1, 0, r"block=0: extent 0 along x is outside \[1, 1024\]"),
        (1, 1025, r"outside \[1, 1024\]"),
        (1, (32, 1, 65), r"along z is outside \[1, 64\]"),
        (1, (64, 32), "2048 threads; the limit is 1024 per block"),
        (1, -1, "block=-1"),
    ],
)
def test_bad_grid_or_block_raises_invalid_argument(grid, block, match):
    with pytest.raises(InvalidArgumentError, match=match):
        launch.prepare_launch(grid, block, [])


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ([1.0], r"args\[0\]=1.0: a Python float is ambiguous"),
        ([1, True], r"args\[1\]=True: bool is ambiguous"),
        ([2**64], "does not fit in 64 bits"),
        ([object()], r"args\[0\] has type object"),
        ([None], r"args\[0\] has type NoneType"),
        ("abc", "must be a sequence"),
    ],
)
def test_bad_arguments_raise_invalid_argument(args, match):
    with pytest.raises(InvalidArgumentError, match=match):
        launch.prepare_launch(1, 1, args)


def test_bad_stream_and_shared_mem_raise_invalid_argument():
    with pytest.raises(InvalidArgumentError, match="stream="):
        launch.prepare_launch(1, 1, [], stream="default")
    with pytest.raises(InvalidArgumentError, match="shared_mem=-1"):
        launch.prepare_launch(1, 1, [], shared_mem=-1)


def test_argument_packing():
    class Pair(ctypes.Structure):
        _fields_ = (("a", ctypes.c_float), ("n", ctypes.c_int32))

    class FakeTensor:
        is_cuda = True

        def data_ptr(self) -> int:
            return 0xABC000

    class FakeArray:
        @property
        def __cuda_array_interface__(self):
            return {"data": (0xDEF000, False), "shape": (1,), "typestr": "<f4", "version": 3}

    class Stream:
        cuda_stream = 0x1234

    config = launch.prepare_launch(
        (2, 3),
        (32,),
        [-5, 2**63, ctypes.c_int32(7), np.float32(1.5), Pair(2.0, 3), FakeTensor(), FakeArray()],
        stream=Stream(),
    )
    assert config.grid == (2, 3, 1) and config.block == (32, 1, 1) and config.stream == 0x1234

    def raw(index: int, size: int) -> bytes:
        return ctypes.string_at(config.params[index], size)

    assert raw(0, 8) == struct.pack("<q", -5)
    assert raw(1, 8) == struct.pack("<Q", 2**63)
    assert raw(2, 4) == struct.pack("<i", 7)
    assert raw(3, 4) == struct.pack("<f", 1.5)
    assert raw(4, 8) == struct.pack("<fi", 2.0, 3)
    assert raw(5, 8) == struct.pack("<Q", 0xABC000)
    assert raw(6, 8) == struct.pack("<Q", 0xDEF000)
    assert launch.stream_handle(None) == 0 and launch.stream_handle(77) == 77


def test_pageable_cpu_tensor_is_refused():
    class CpuTensor:
        is_cuda = False
        device = "cpu"

        def is_pinned(self) -> bool:
            return False

        def data_ptr(self) -> int:
            return 0x1000

    with pytest.raises(InvalidArgumentError, match="pageable host memory"):
        launch.prepare_launch(1, 1, [CpuTensor()])


def test_load_module_without_gpu_raises_cuda_unavailable(nvcc):
    if jit.is_available():
        pytest.skip("a GPU is visible; this checks the no-GPU path")
    with pytest.raises(jit.CudaUnavailableError, match=r"no NVIDIA driver|no CUDA device"):
        jit.load_module(KERNELS)
    assert nvcc.runs() == 0  # it failed before compiling anything


# ---------------------------------------------------------------------------------------------
# Registry and CLI


def test_shmem_kernels_spec_points_at_the_installed_sources():
    from mori.shmem.bench import gpu as bench_gpu

    library = registry.shmem_kernels()
    assert [spec.name for spec in library] == ["shmem_kernels"]  # the library alone: no benchmark
    specs = {spec.name: spec for spec in [*library, *bench_gpu.jit_kernels()]}
    assert set(specs) == {"shmem_kernels", "bench_kernels_thread", "bench_kernels_warp", "bench_kernels_block"}
    discovered, problems = registry.discover()
    assert problems == []
    assert set(specs) <= {kernel.spec.name for kernel in discovered}  # both entry points are registered
    assert specs["shmem_kernels"].source == jit.source_dir() / "shmem_kernels.cu"
    assert [specs[f"bench_kernels_{s}"].defines["MORI_BENCH_SCOPE"] for s in ("thread", "warp", "block")] == [0, 1, 2]
    assert all(spec.source.is_file() for spec in specs.values())
    assert jit.source_dir().name == "device_src"
    assert (jit.include_dir() / "mori_shmem").is_dir()


def _run_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mori.shmem.jit", *argv],
        capture_output=True,
        text=True,
        env=env or dict(os.environ),
        timeout=300,
        check=False,
    )


def test_cli_info(nvcc, jit_cache):
    completed = _run_cli("info")
    assert completed.returncode == 0, completed.stderr
    assert "compiler" in completed.stdout and str(nvcc.path) in completed.stdout
    assert str(jit_cache) in completed.stdout
    assert "arch" in completed.stdout
    assert "GPU" in completed.stdout


def _fake_distribution(site: Path) -> None:
    """A dist-info that declares two variants of the test kernels in mori.jit_kernels."""
    dist = site / "fake_mori_kernels-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-mori-kernels\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[mori.jit_kernels]\nfake-mori-kernels = fake_mori_kernels:kernels\n")
    (site / "fake_mori_kernels.py").write_text(
        "from pathlib import Path\n"
        "from mori.shmem.jit import KernelSpec\n\n"
        "def kernels():\n"
        f"    source = Path({str(KERNELS)!r})\n"
        "    return [KernelSpec('jit_test_float', source),\n"
        "            KernelSpec('jit_test_double', source, {'VALUE_T': 'double'})]\n"
    )


def test_cli_precompile_then_cached_then_clear(nvcc, jit_cache, tmp_path):
    site = tmp_path / "site"
    _fake_distribution(site)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    argv = ("precompile", "--compiler", "nvcc", "--arch", ARCH, "--jobs", "2", "--only", "jit_test_*")

    first = _run_cli(*argv, env=env)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[0].split() == ["name", "arch", "status", "seconds", "package"]
    assert {tuple(line.split()[:3]) for line in lines[1:]} == {
        ("jit_test_float", ARCH, "compiled"),
        ("jit_test_double", ARCH, "compiled"),
    }
    assert nvcc.runs() == 2
    assert len(list((jit_cache / ARCH).glob("*.cubin"))) == 2

    second = _run_cli(*argv, env=env)
    assert second.returncode == 0, second.stderr
    assert all(line.split()[2] == "cached" for line in second.stdout.splitlines()[1:])
    assert nvcc.runs() == 2

    # What precompile filled is what compile() looks up.
    assert jit.compile(KERNELS, name="jit_test_double", defines={"VALUE_T": "double"}, arch=ARCH).exists()
    assert jit.KernelSpec("jit_test_float", KERNELS).compile(arch=ARCH).exists()
    assert nvcc.runs() == 2

    none = _run_cli("precompile", "--only", "no_such_kernel", env=env)
    assert none.returncode == 1 and "no declared kernel matches" in none.stderr

    cleared = _run_cli("clear-cache", env=env)
    assert cleared.returncode == 0 and "removed" in cleared.stdout
    assert not list(jit_cache.rglob("*.cubin"))


def test_cli_precompile_reports_a_failed_kernel(nvcc, tmp_path):
    site = tmp_path / "site"
    _fake_distribution(site)
    (site / "fake_mori_kernels.py").write_text(
        "from mori.shmem.jit import KernelSpec\n\n"
        "def kernels():\n"
        f"    return [KernelSpec('jit_test_broken', {str(KERNELS)!r}, {{'VALUE_T': 'no_such_type'}})]\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    completed = _run_cli("precompile", "--arch", ARCH, "--only", "jit_test_*", env=env)
    assert completed.returncode == 1
    assert "failed" in completed.stdout and "no_such_type" in completed.stderr


# ---------------------------------------------------------------------------------------------
# On a GPU


@pytest.fixture
def torch_cuda():
    torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tests compare with torch)")
    if not jit.is_available():
        pytest.skip(f"no GPU: {jit.driver.unavailable_reason()}")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


@pytest.fixture(params=["nvcc", "nvrtc"])
def gpu_compiler(request, monkeypatch, tmp_path, torch_cuda) -> str:
    if request.param == "nvcc":
        real = _real_nvcc()
        if real is None:
            pytest.skip("nvcc not found (no CUDA toolkit)")
        monkeypatch.setenv("MORI_JIT_NVCC", real)
    elif compiler.find_nvrtc() is None:
        pytest.skip("NVRTC not found (pip install nvidia-cuda-nvrtc)")
    monkeypatch.setenv("MORI_JIT_COMPILER", request.param)
    return request.param


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("value_t", "ctype", "dtype"), [("float", ctypes.c_float, "float32"), ("double", ctypes.c_double, "float64")]
)
def test_launch_writes_affine_values(gpu_compiler, torch_cuda, value_t, ctype, dtype):
    torch = torch_cuda
    n = 100_000
    module = jit.load_module(KERNELS, defines={"VALUE_T": value_t})
    out = torch.full((n,), -1.0, dtype=getattr(torch, dtype), device="cuda")
    module.function("affine_fill").launch((n + 255) // 256, 256, [out, ctype(3.0), ctype(-7.0), ctypes.c_int32(n)])
    torch.cuda.synchronize()
    expected = torch.arange(n, dtype=getattr(torch, dtype), device="cuda") * 3 - 7
    assert torch.equal(out, expected)


@pytest.mark.gpu
def test_write_global_then_kernel_reads_it(gpu_compiler, torch_cuda):
    torch = torch_cuda
    n = 1000
    module = jit.load_module(KERNELS)
    address, size = module.global_address("mori_test_coeffs")
    assert address != 0 and size == 8
    module.write_global("mori_test_coeffs", struct.pack("<2f", 2.5, -1.0))
    assert module.read_global("mori_test_coeffs") == struct.pack("<2f", 2.5, -1.0)
    out = torch.zeros(n, device="cuda")
    module.function("affine_from_global").launch(4, 256, [out, ctypes.c_int32(n)])
    torch.cuda.synchronize()
    assert torch.equal(out, torch.arange(n, dtype=torch.float32, device="cuda") * 2.5 - 1.0)
    with pytest.raises(InvalidArgumentError, match="4 bytes given, but the global is 8 bytes"):
        module.write_global("mori_test_coeffs", b"\0" * 4)
    with pytest.raises(jit.JitSymbolNotFoundError, match="no global 'no_such_global'") as missing:
        module.write_global("no_such_global", b"")
    assert missing.value.symbol == "no_such_global" and isinstance(missing.value, InvalidArgumentError)


@pytest.mark.gpu
def test_struct_argument_by_value(gpu_compiler, torch_cuda):
    torch = torch_cuda

    class Affine(ctypes.Structure):
        _fields_ = (("a", ctypes.c_float), ("b", ctypes.c_float), ("n", ctypes.c_int32))

    n = 777
    out = torch.zeros(n + 10, device="cuda")
    jit.load_module(KERNELS).function("affine_struct").launch(4, 256, [out, Affine(0.5, 4.0, n)])
    torch.cuda.synchronize()
    assert torch.equal(out[:n], torch.arange(n, dtype=torch.float32, device="cuda") * 0.5 + 4.0)
    assert torch.equal(out[n:], torch.zeros(10, device="cuda"))


@pytest.mark.gpu
def test_launch_on_torch_streams(gpu_compiler, torch_cuda):
    torch = torch_cuda
    n = 4096
    function = jit.load_module(KERNELS).function("iota_i64")
    stream = torch.cuda.Stream()
    outs = []
    with torch.cuda.stream(stream):
        for offset, handle in ((2**40, stream), (5, stream.cuda_stream)):
            out = torch.zeros(n, dtype=torch.int64, device="cuda")
            function.launch(n // 128, 128, [out.data_ptr(), offset, ctypes.c_int32(n)], stream=handle)
            outs.append((offset, out))
    stream.synchronize()
    for offset, out in outs:
        assert torch.equal(out, torch.arange(n, device="cuda", dtype=torch.int64) + offset)


@pytest.mark.gpu
def test_cuda_array_interface_argument(gpu_compiler, torch_cuda):
    torch = torch_cuda
    n = 256
    out = torch.zeros(n, dtype=torch.int64, device="cuda")

    class View:
        __cuda_array_interface__ = out.__cuda_array_interface__

    jit.load_module(KERNELS).function("iota_i64").launch(1, n, [View(), -3, ctypes.c_int32(n)])
    torch.cuda.synchronize()
    assert torch.equal(out, torch.arange(n, device="cuda", dtype=torch.int64) - 3)


@pytest.mark.gpu
def test_dynamic_shared_memory_beyond_48k(gpu_compiler, torch_cuda):
    torch = torch_cuda
    block, blocks = 256, 8
    shared_bytes = 100 * 1024
    source_tensor = torch.arange(block * blocks, dtype=torch.float32, device="cuda")
    out = torch.zeros_like(source_tensor)
    function = jit.load_module(KERNELS).function("reverse_in_shared")
    function.launch(blocks, block, [source_tensor, out, ctypes.c_int32(shared_bytes // 4)], shared_mem=shared_bytes)
    torch.cuda.synchronize()
    assert torch.equal(out, source_tensor.view(blocks, block).flip(1).reshape(-1))
    with pytest.raises(InvalidArgumentError, match="exceeds the"):
        function.launch(1, block, [source_tensor, out, ctypes.c_int32(0)], shared_mem=16 * 2**20)


@pytest.mark.gpu
def test_modules_are_cached_per_context_and_missing_kernels_named(gpu_compiler, torch_cuda):
    first = jit.load_module(KERNELS, defines={"VALUE_T": "float"})
    assert jit.load_module(KERNELS, defines={"VALUE_T": "float"}) is first
    assert jit.KernelSpec("jit_test_kernels", KERNELS, {"VALUE_T": "float"}).load() is first
    assert first.function("affine_fill") is first.function("affine_fill")
    assert first.arch == jit.resolve_arch()[0]
    with pytest.raises(jit.JitSymbolNotFoundError, match="no kernel 'no_such_kernel'"):
        first.function("no_such_kernel")


@pytest.mark.gpu
def test_bad_launch_raises_before_anything_runs(gpu_compiler, torch_cuda):
    torch = torch_cuda
    out = torch.full((64,), 9, dtype=torch.int64, device="cuda")
    function = jit.load_module(KERNELS).function("iota_i64")
    for grid, block in ((0, 64), (1, 2048), (1, (64, 64))):
        with pytest.raises(InvalidArgumentError):
            function.launch(grid, block, [out, 0, ctypes.c_int32(64)])
    with pytest.raises(InvalidArgumentError, match="float is ambiguous"):
        function.launch(1, 64, [out, 0.0, ctypes.c_int32(64)])
    torch.cuda.synchronize()
    assert torch.equal(out, torch.full((64,), 9, dtype=torch.int64, device="cuda"))


@pytest.mark.gpu
def test_default_arch_is_the_gpus(torch_cuda):
    major, minor = torch_cuda.cuda.get_device_capability()
    assert jit.resolve_arch() == (f"sm_{major}{minor}", f"GPU {torch_cuda.cuda.current_device()}")


@pytest.mark.gpu
def test_unloaded_module_refuses_use(gpu_compiler, torch_cuda):
    module = jit.load_module(KERNELS, defines={"VALUE_T": "int"})
    module.unload()
    with pytest.raises(jit.JitError, match="unloaded"):
        module.function("affine_fill")
    again = jit.load_module(KERNELS, defines={"VALUE_T": "int"})
    assert again is not module and again.function("affine_fill") is not None
