# SPDX-License-Identifier: MIT
"""EngineDesc / MemoryDesc wire form: round trips, and rejection of anything else."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mori.io import DescriptorError, EngineDesc, MemoryDesc, MemoryLocationType

texts = st.text(max_size=40)
engine_descs = st.builds(
    EngineDesc, key=texts.filter(bool), node_id=texts, hostname=texts, host=texts,
    port=st.integers(1, 65535), pid=st.integers(0, 2**63), secret=st.binary(max_size=64),
)  # fmt: skip
memory_descs = st.builds(
    MemoryDesc, engine_key=texts.filter(bool), id=st.integers(0, 2**32 - 1), device_id=st.integers(-1, 64),
    device_bus_id=st.text(max_size=16), numa_node=st.integers(-1, 8), data=st.integers(0, 2**64 - 1),
    size=st.integers(0, 2**64 - 1), loc=st.sampled_from(list(MemoryLocationType)), ipc_handle=st.binary(max_size=64),
    ipc_offset=st.integers(0, 2**64 - 1),
)  # fmt: skip


@given(engine_descs)
def test_engine_desc_round_trip(desc):
    assert EngineDesc.unpack(desc.pack()) == desc


@given(memory_descs)
def test_memory_desc_round_trip(desc):
    assert MemoryDesc.unpack(desc.pack()) == desc


@given(st.binary(max_size=200))
def test_random_bytes_are_rejected(data):
    for cls in (EngineDesc, MemoryDesc):
        with pytest.raises(DescriptorError):
            cls.unpack(data)


@given(engine_descs, memory_descs, st.data())
def test_mutated_descriptors_decode_or_raise_descriptor_error(edesc, mdesc, data):
    for desc in (edesc, mdesc):
        packed = bytearray(desc.pack())
        cut = data.draw(st.integers(0, len(packed)))
        flips = data.draw(st.lists(st.tuples(st.integers(0, len(packed) - 1), st.integers(0, 255)), max_size=4))
        for pos, value in flips:
            packed[pos] = value
        mutated = bytes(packed[:cut]) if data.draw(st.booleans()) else bytes(packed) + b"x"
        with contextlib.suppress(DescriptorError):  # the only exception allowed
            type(desc).unpack(mutated)


def test_version_and_bounds_are_checked():
    packed = EngineDesc("k", "n", "h", "127.0.0.1", 5, 1, b"s").pack()
    with pytest.raises(DescriptorError, match="format version 3"):
        EngineDesc.unpack(packed[:4] + struct.pack("<H", 3) + packed[6:])
    with pytest.raises(DescriptorError, match="trailing"):
        EngineDesc.unpack(packed + b"\0")
    with pytest.raises(DescriptorError, match="port is 0"):
        EngineDesc.unpack(EngineDesc("k", "n", "h", "x", 0, 1).pack())
    huge = b"MIOE" + struct.pack("<HI", 2, 10**9)
    with pytest.raises(DescriptorError, match="limit 1024"):
        EngineDesc.unpack(huge)
    with pytest.raises(DescriptorError, match="needs bytes"):
        MemoryDesc.unpack("text")  # type: ignore[arg-type]
    bad_loc = bytearray(MemoryDesc("k", 1, 0, "", 0, 0, 8, MemoryLocationType.CPU).pack())
    bad_loc[4 + 2 + 4 + 1 + 28] = 9  # the loc byte
    with pytest.raises(DescriptorError, match="loc=9"):
        MemoryDesc.unpack(bytes(bad_loc))
