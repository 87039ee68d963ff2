# SPDX-License-Identifier: MIT
"""The native engine's route chain (src/engine/route.cpp) picks each transfer's backend when it is
posted: sessions follow the engine's backends as they are at that moment, with nothing cached in
Python."""

from __future__ import annotations

import numpy as np
from conftest import random_bytes, register

from mori.io import BackendType, StatusCode


def test_a_session_follows_the_backends_of_its_engine(pair):
    a, b = pair
    src, dst = random_bytes(8192, 3), np.zeros(8192, np.uint8)
    m_src, m_dst = register(a, src), register(b, dst)
    session = a.create_session(m_src, m_dst)
    assert session is not None
    assert session.write(0, 0, 4096, a.allocate_transfer_uid()).WaitFor(20000) == StatusCode.SUCCESS

    a.remove_backend(BackendType.TCP)
    refused = session.write(4096, 4096, 4096, a.allocate_transfer_uid())
    assert refused.WaitFor(20000) == StatusCode.ERR_BAD_STATE
    assert "No available backend found, create backend first" in refused.Message()
    assert not dst[4096:].any()

    a.create_backend(BackendType.TCP)
    assert session.write(4096, 4096, 4096, a.allocate_transfer_uid()).WaitFor(20000) == StatusCode.SUCCESS
    assert np.array_equal(dst, src)


def test_without_a_backend_that_takes_the_pair_there_is_no_session(pair):
    a, b = pair
    m_src, m_dst = register(a, random_bytes(64, 4)), register(b, np.zeros(64, np.uint8))
    a.remove_backend(BackendType.TCP)
    assert a.create_session(m_src, m_dst) is None
    status = a.read(m_src, 0, m_dst, 0, 64, a.allocate_transfer_uid())
    assert status.WaitFor(20000) == StatusCode.ERR_BAD_STATE


def test_a_new_descriptor_object_for_the_same_memory_is_used_as_given(pair):
    # The engine keeps the native form of a remote MemoryDesc while the caller passes the same
    # object; a different object with the same id (here: claiming a larger size) is read anew.
    import dataclasses

    a, b = pair
    src, dst = random_bytes(4096, 5), np.zeros(4096, np.uint8)
    m_src, m_dst = register(a, src), register(b, dst)
    assert a.write(m_src, 0, m_dst, 0, 4096, a.allocate_transfer_uid()).WaitFor(20000) == StatusCode.SUCCESS
    larger = dataclasses.replace(m_dst, size=8192)
    beyond = a.write(m_src, 0, larger, 4096, 4096, a.allocate_transfer_uid())
    # The claim passes the initiator's check; the target refuses bytes past what it registered.
    assert beyond.WaitFor(20000) not in (StatusCode.SUCCESS, StatusCode.IN_PROGRESS)
    smaller = dataclasses.replace(m_dst, size=1024)
    refused = a.write(m_src, 0, smaller, 0, 4096, a.allocate_transfer_uid())
    assert refused.WaitFor(20000) == StatusCode.ERR_INVALID_ARGS
    assert "exceeds the remote memory's size 1024" in refused.Message()
    assert np.array_equal(dst, src)
