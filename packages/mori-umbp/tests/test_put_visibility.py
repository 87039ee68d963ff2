# SPDX-License-Identifier: MIT
"""A put returns True only for a block committed and visible to every client (NOTE [one key,
many writers]): writers of one fresh key, threads or processes, each read it back at once; a
writer SIGKILLed mid-put leaves nothing reported stored and its reservation is freed; a key held
past a writer's wait is reported not stored."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from conftest import PAGE, PeerProcess, make_client, master_config, member_peer_stub, wait_for

from mori import testing
from mori.umbp import MasterServer, auth
from mori.umbp.rpc import peer_pb

pytestmark = pytest.mark.timeout(120)
DRAM = 2
ROUNDS = 20


def _data(seed: int, size: int = PAGE) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def test_two_threads_put_one_key_then_each_gets_it():
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 4 * ROUNDS * PAGE),
        make_client(master.address, "writers") as client,
    ):
        for r in range(ROUNDS):
            key = f"shared-prefix-{r}"
            barrier = threading.Barrier(2)
            results: list[tuple[bool, bool, bytes] | BaseException] = [b"", b""]  # type: ignore[list-item]

            def writer(i: int, key: str = key, barrier: threading.Barrier = barrier, results=results, r=r) -> None:
                try:
                    data, back = _data(2 * r + i), np.zeros(PAGE, np.uint8)
                    barrier.wait(5)
                    put = client.put_from_ptr(key, data.ctypes.data, PAGE)
                    got = client.get_into_ptr(key, back.ctypes.data, PAGE)
                    results[i] = (put, got, back.tobytes())
                except BaseException as exc:  # surfaced below
                    results[i] = exc

            threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            for res in results:
                assert not isinstance(res, BaseException), res
            (p0, g0, b0), (p1, g1, b1) = results  # type: ignore[misc]
            assert (p0, g0, p1, g1) == (True, True, True, True), f"round {r}"
            # One block: both read the same bytes, which one of them wrote.
            assert b0 == b1 and b0 in (_data(2 * r).tobytes(), _data(2 * r + 1).tobytes())


def test_two_processes_put_one_key_then_each_gets_it():
    with MasterServer(master_config()) as master, make_client(master.address, "owner", 4 * ROUNDS * PAGE):
        writers = [PeerProcess(master.address, f"proc-writer-{i}", 0) for i in range(2)]
        try:
            for r in range(ROUNDS // 2):
                key = f"proc-shared-{r}"
                for i, w in enumerate(writers):  # both commands in flight before either answers
                    w.send(("putget", key, 2 * r + i, PAGE))
                answers = [w.recv(30, what="its put and get") for w in writers]
                assert [a[:2] for a in answers] == [(True, True), (True, True)], f"round {r}"
                assert answers[0][2] == answers[1][2]
                assert answers[0][2] in (_data(2 * r).tobytes(), _data(2 * r + 1).tobytes())
        finally:
            for w in writers:
                w.kill()


def test_writer_killed_mid_put_leaves_nothing_stored_and_frees_its_pages(monkeypatch):
    monkeypatch.setenv("UMBP_RPC_TIMEOUT_MS", "4000")  # the survivor's wait outlives the 1.5 s pending TTL
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 8 * PAGE) as owner,
        make_client(master.address, "survivor") as survivor,
    ):
        import peer_programs

        secret = auth.member_secret(None, master.address)
        with testing.PeerProcess(
            peer_programs.hold_slot, owner.peer_address, secret, "doomed", PAGE, DRAM, name="doomed writer"
        ) as writer:
            assert writer.recv(60, what="its slot") == peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
            assert owner.store.capacities()[DRAM][1] == 7 * PAGE  # the dead writer's reservation
            writer.kill()  # SIGKILL mid-put
        assert not survivor.exists("doomed")
        # A second writer of the key waits for the dead one's slot to expire, then stores its own.
        mine, back = _data(99), np.zeros(PAGE, np.uint8)
        start = time.monotonic()
        assert survivor.put_from_ptr("doomed", mine.ctypes.data, PAGE)
        assert time.monotonic() - start < 4
        assert survivor.get_into_ptr("doomed", back.ctypes.data, PAGE)
        assert np.array_equal(back, mine)
        assert owner.store.capacities()[DRAM][1] == 7 * PAGE  # one block; the dead slot's page is free


def test_a_key_held_past_the_wait_is_reported_not_stored(monkeypatch):
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 8 * PAGE) as owner,
        make_client(master.address, "late") as late,
    ):
        ch, stub = member_peer_stub(master.address, owner.peer_address, "slow-writer")
        with ch:
            req = peer_pb.AllocateSlotRequest(size=PAGE, tier=DRAM, key="held")
            assert stub.AllocateSlot(req, timeout=2).outcome == peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
            monkeypatch.setenv("UMBP_RPC_TIMEOUT_MS", "400")  # shorter than the 1.5 s pending TTL
            data = _data(5)
            assert late.put_from_ptr("held", data.ctypes.data, PAGE) is False
            monkeypatch.setenv("UMBP_RPC_TIMEOUT_MS", "2000")
            assert not late.exists("held")
            # Once the holder's slot expires, the key is free for the next writer.
            assert wait_for(lambda: late.put_from_ptr("held", data.ctypes.data, PAGE), timeout=10, every=0.3)
            back = np.zeros(PAGE, np.uint8)
            assert late.get_into_ptr("held", back.ctypes.data, PAGE) and np.array_equal(back, data)


def test_waiting_writers_never_take_every_peer_worker():
    with MasterServer(master_config()) as master, make_client(master.address, "busy-owner", 8 * PAGE) as owner:
        ch, stub = member_peer_stub(master.address, owner.peer_address, "holder")
        with ch:
            held = peer_pb.AllocateSlotRequest(size=PAGE, tier=DRAM, key="hot")
            assert stub.AllocateSlot(held, timeout=2).outcome == peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
            other = stub.AllocateSlot(peer_pb.AllocateSlotRequest(size=PAGE, tier=DRAM, key="cold"), timeout=2)
            answers: list[tuple[int, float]] = []

            def wait_on_hot() -> None:
                start = time.monotonic()
                res = stub.AllocateSlot(held, timeout=3.0)  # the hot slot's TTL (1.5 s) ends first
                answers.append((int(res.outcome), time.monotonic() - start))

            threads = [threading.Thread(target=wait_on_hot) for _ in range(8)]  # as many as the peer's workers
            for t in threads:
                t.start()
            time.sleep(0.3)
            start = time.monotonic()  # a commit still finds a worker while the waiters wait
            assert stub.CommitSlot(peer_pb.CommitSlotRequest(slot_id=other.slot_id, key="cold"), timeout=2).success
            commit_s = time.monotonic() - start
            for t in threads:
                t.join(10)
        assert len(answers) == 8
        waited = [s for _, s in answers if s > 0.9]
        assert 1 <= len(waited) <= 4, answers  # at most half the workers wait; the rest answer at once
        assert commit_s < min(waited) - 0.3, (commit_s, answers)
        # Of the waiters, the first to see the hot slot expire takes it; nobody hears "exists".
        outcomes = [o for o, _ in answers]
        assert peer_pb.AllocateSlotResponse.SUCCESS_ALREADY_EXISTS not in outcomes
        assert outcomes.count(peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED) == 1
