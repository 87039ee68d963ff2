# SPDX-License-Identifier: MIT
"""mori-ep's vLLM plugin (mori.ep.vllm_plugin), loaded as vLLM loads it: through the installed
wheel's ``vllm.general_plugins`` entry point.

vLLM itself is not installed (it is a multi-GB install). The test writes a minimal stand-in tree
with vLLM's module paths and the shape of the code the plugin touches, as read at vLLM commit
001430048e8175c8dff1bc57e1a81a1fa75460f9: ``vllm.platforms.current_platform`` with
``is_cuda()`` / ``is_rocm()``; ``vllm.platforms.rocm.on_gfx942()`` / ``on_gfx950()``, which are
false on any GPU that is not that AMD architecture; and
``vllm.distributed.device_communicators.all2all.MoriAll2AllManager._make_all2all_kwargs``, which
imports those predicates inside the method, asserts that one of them holds, and for more than one
node picks its launch geometry by them (NotImplementedError when neither holds). The stand-in's
code is written here, not vLLM's; what it shares with vLLM is those names and that control flow.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import sys
import textwrap
from pathlib import Path

import pytest

from mori.ep.vllm_plugin import LOGGER_NAME

STAND_IN = {
    "vllm/__init__.py": "",
    "vllm/platforms/__init__.py": """
        class StandInPlatform:
            def __init__(self, kind):
                self.kind = kind

            def is_cuda(self):
                return self.kind == "cuda"

            def is_rocm(self):
                return self.kind == "rocm"

        current_platform = StandInPlatform("cuda")
    """,
    "vllm/platforms/rocm.py": """
        GCN_ARCH = ""  # what the test's AMD GPU reports; vLLM asks amdsmi, then torch

        def on_gfx942():
            return "gfx942" in GCN_ARCH

        def on_gfx950():
            return "gfx950" in GCN_ARCH
    """,
    "vllm/distributed/__init__.py": "",
    "vllm/distributed/device_communicators/__init__.py": "",
    "vllm/distributed/device_communicators/all2all.py": """
        class MoriAll2AllManager:
            def __init__(self, internode):
                self.internode = internode

            def _make_all2all_kwargs(self, rank, num_ep_ranks):
                from vllm.platforms.rocm import on_gfx942, on_gfx950

                assert on_gfx942() or on_gfx950(), "only gfx942 and gfx950"
                if not self.internode:
                    kernel, warps, blocks, rdma_blocks = "IntraNode", 16, 80, 0
                elif on_gfx942():
                    kernel, warps, blocks, rdma_blocks = "InterNodeV1", 16, 32, 16
                elif on_gfx950():
                    kernel, warps, blocks, rdma_blocks = "InterNodeV1", 8, 64, 32
                else:
                    raise NotImplementedError("only gfx942 and gfx950")
                return dict(rank=rank, world_size=num_ep_ranks, kernel_type=kernel,
                            warp_num_per_block=warps, block_num=blocks, rdma_block_num=rdma_blocks)
    """,
}

GFX942_INTERNODE = {"kernel_type": "InterNodeV1", "warp_num_per_block": 16, "block_num": 32, "rdma_block_num": 16}


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The stand-in vLLM on sys.path, imported fresh, and forgotten afterwards."""
    for relative, text in STAND_IN.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


def _load_plugin_like_vllm() -> None:
    """What vLLM's load_general_plugins does: every entry point of the group, loaded and called."""
    (plugin,) = [ep for ep in importlib.metadata.entry_points(group="vllm.general_plugins") if ep.name == "mori_ep"]
    assert plugin.value == "mori.ep.vllm_plugin:register"
    plugin.load()()


def _platform(kind: str, arch: str = "") -> None:
    importlib.import_module("vllm.platforms").current_platform.kind = kind
    if kind == "rocm":
        importlib.import_module("vllm.platforms.rocm").GCN_ARCH = arch


def _manager(internode: bool):
    return importlib.import_module("vllm.distributed.device_communicators.all2all").MoriAll2AllManager(internode)


def test_the_wheel_declares_the_entry_point() -> None:
    dist = importlib.metadata.distribution("mori-ep")
    declared = {ep.name: ep.value for ep in dist.entry_points if ep.group == "vllm.general_plugins"}
    assert declared == {"mori_ep": "mori.ep.vllm_plugin:register"}


def test_on_nvidia_the_check_passes_after_the_plugin(stand_in, caplog) -> None:
    _platform("cuda")
    with pytest.raises(AssertionError, match="only gfx942 and gfx950"):
        _manager(internode=False)._make_all2all_kwargs(0, 8)  # what vLLM does on NVIDIA by itself
    del sys.modules["vllm.platforms.rocm"]  # that call imported it; the plugin's path must not

    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    _load_plugin_like_vllm()
    _load_plugin_like_vllm()  # vLLM loads plugins in several places; the second must not wrap again
    notes = [r for r in caplog.records if r.name == LOGGER_NAME]
    assert len(notes) == 1 and "_make_all2all_kwargs" in notes[0].getMessage()

    single = _manager(internode=False)._make_all2all_kwargs(3, 8)
    assert single == {"rank": 3, "world_size": 8, "kernel_type": "IntraNode", "warp_num_per_block": 16,
                      "block_num": 80, "rdma_block_num": 0}  # fmt: skip
    multi = _manager(internode=True)._make_all2all_kwargs(3, 16)
    assert multi == {"rank": 3, "world_size": 16, **GFX942_INTERNODE}
    # Nothing outside that method changed: the real predicates were never imported nor replaced.
    assert "vllm.platforms.rocm" not in sys.modules
    rocm = importlib.import_module("vllm.platforms.rocm")
    assert rocm.on_gfx942() is False and rocm.on_gfx950() is False


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("internode", [False, True])
def test_on_supported_amd_gpus_the_result_is_unchanged(stand_in, arch: str, internode: bool) -> None:
    _platform("rocm", arch)
    before = _manager(internode)._make_all2all_kwargs(1, 16)
    _load_plugin_like_vllm()
    assert _manager(internode)._make_all2all_kwargs(1, 16) == before


def test_on_other_amd_gpus_the_check_still_fails(stand_in) -> None:
    _platform("rocm", "gfx90a")
    _load_plugin_like_vllm()
    with pytest.raises(AssertionError, match="only gfx942 and gfx950"):
        _manager(internode=False)._make_all2all_kwargs(0, 8)


def test_a_vllm_without_the_method_is_left_alone(stand_in, tmp_path: Path, caplog) -> None:
    (tmp_path / "vllm/distributed/device_communicators/all2all.py").write_text("class MoriAll2AllManager:\n    pass\n")
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    _load_plugin_like_vllm()
    assert any("nothing changed" in r.getMessage() for r in caplog.records)
    all2all = importlib.import_module("vllm.distributed.device_communicators.all2all")
    assert not hasattr(all2all.MoriAll2AllManager, "_make_all2all_kwargs")
