# SPDX-License-Identifier: MIT
"""Bad input raises a typed error naming the argument and the limit before anything launches; a
stalled peer gives a timeout error, never a hang; overflowing receive buffers are reported."""

from __future__ import annotations

import ep_programs
import pytest
import torch

from mori.ep import EpConfigError, EpDispatchCombineConfig, EpDispatchCombineKernelType
from mori.ep.workload import Workload
from mori.shmem.testing import run_pes

W = Workload(world_size=2, max_tokens=8, hidden=32, topk=2, experts_per_rank=2, tokens=8)


def _config(**changes: object) -> EpDispatchCombineConfig:
    fields: dict[str, object] = dict(
        data_type=torch.bfloat16,
        rank=0,
        world_size=2,
        hidden_dim=32,
        scale_dim=0,
        scale_type_size=0,
        max_token_type_size=2,
        max_num_inp_token_per_rank=8,
        num_experts_per_rank=2,
        num_experts_per_token=2,
    )
    fields.update(changes)
    return EpDispatchCombineConfig(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("rank", 2, "rank=2 must be in [0, 1]"),
        ("world_size", 0, "world_size=0"),
        ("num_experts_per_token", 33, "num_experts_per_token=33 must be in [1, 32]"),
        ("hidden_dim", 0, "hidden_dim=0"),
        ("gpu_per_node", 3, "gpu_per_node=3 must be a power of 2"),
        ("quant_type", "int4", "quant_type='int4'"),
        ("kernel_type", 9, "kernel_type=9"),
        ("max_num_inp_token_per_rank", 1.5, "must be an int"),
    ],
)
def test_config_fields_are_checked(field: str, value: object, expected: str) -> None:
    with pytest.raises(EpConfigError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        _config(**{field: value})


def test_config_sizes_follow_mori() -> None:
    config = _config(max_total_recv_tokens=5)
    assert config.max_num_tokens_to_recv_per_rank() == 3  # ceil(5 / 2), under M = 8
    assert config.max_num_tokens_to_recv() == 6
    assert config.max_num_tokens_to_send() == 16
    assert _config().max_num_tokens_to_recv() == 16
    assert _config(kernel_type=5).kernel_type is EpDispatchCombineKernelType.IntraNodeLL


def test_bad_calls_raise_before_launch(backend: str) -> None:
    calls = [
        "combine_before_dispatch",
        "expert_out_of_range",
        "expert_below_minus_one",
        "indices_int64",
        "too_many_tokens",
        "wrong_dtype",
        "wrong_shape",
        "hidden_too_large",
        "weights_shape",
        "wrong_device",
        "not_contiguous",
        "trace_without_profiler",
    ]
    results = run_pes(ep_programs.call_and_report, 2, backend, W, calls, env={"MORI_SHMEM_BACKEND": backend})
    expected = {
        "combine_before_dispatch": "before any dispatch",
        "expert_out_of_range": "expert id 4; ids must be in [-1, 4)",
        "expert_below_minus_one": "expert id -2",
        "indices_int64": "indices.dtype=torch.int64 is not supported",
        "too_many_tokens": "input has 9 rows; the limit is [0, 8]",
        "wrong_dtype": "input.dtype=torch.int16 is not supported",
        "wrong_shape": "input must be 2-D",
        "hidden_too_large": "hidden size 64, above config.hidden_dim=32",
        "weights_shape": "weights has 1 columns, expected 2",
        "wrong_device": "input is on meta",
        "not_contiguous": "input must be contiguous",
        "trace_without_profiler": "set MORI_ENABLE_PROFILER=1",
    }
    for rank_messages in results:
        lines = dict(line.split("|", 1) for line in rank_messages.splitlines())
        for name, fragment in expected.items():
            kind, _, message = lines[name].partition("|")
            assert kind == ("EpConfigError" if name == "trace_without_profiler" else "EpInputError"), lines[name]
            assert fragment in message, f"{name}: {message!r} lacks {fragment!r}"


def test_stalled_peer_times_out(backend: str) -> None:
    env = {"MORI_SHMEM_BACKEND": backend, "MORI_EP_TIMEOUT": "2"}
    results = run_pes(ep_programs.stall_one_rank, 2, backend, W, env=env, timeout=120)
    assert results[1] == "stalled"
    assert results[0].startswith("EpTimeoutError"), results[0]
    seconds = float(results[0].split(" after ")[1].split("s:")[0])
    assert 1.5 <= seconds < 30, results[0]


def test_receive_overflow_is_reported(backend: str) -> None:
    results = run_pes(ep_programs.overflow, 2, backend, W, 4, env={"MORI_SHMEM_BACKEND": backend})
    assert results[0].startswith("EpOverflowError"), results[0]
    assert "max_num_tokens_to_recv()=4" in results[0]


def test_heap_too_small_names_the_bytes_needed(backend: str) -> None:
    big = Workload(world_size=2, max_tokens=65536, hidden=1024, topk=2, experts_per_rank=2, tokens=8)
    results = run_pes(ep_programs.make_op_error, 2, backend, big, env={"MORI_SHMEM_BACKEND": backend})
    for message in results:
        assert message.startswith("HeapExhaustedError"), message
        assert "raise MORI_SHMEM_HEAP_SIZE" in message and "the op needs" in message
