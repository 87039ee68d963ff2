# SPDX-License-Identifier: MIT
"""A pool node in its own process: ``serve_peer`` joins the pool and serves until told to exit
(or killed). Commands over the pipe: ("keys",) the blocks it owns in page tiers, ("tiers",)
{key: tier} of its page blocks and its SSD keys, ("caps",) its tier capacities, ("flush",) a
heartbeat now, ("drain",) waits for its spills, ("inbound",
engine key, uid) the inbound status code of a transfer (None: none, as after P2P), ("putget", key,
seed, size) (put ok, get ok, the bytes read), ("exit",). ``hold_slot`` allocates a pending slot and
then waits to be killed (a writer dying mid-put). ``die_in_commit`` "before" makes the node's first
commit RPC end the process before committing; "after" once the commits are made and the master
has acknowledged them, before the answer leaves (a node dying mid-batch)."""

from __future__ import annotations


def serve_peer(
    conn,
    master_address: str,
    node_id: str,
    capacity: int,
    ssd_dir: str = "",
    hbm_bytes: int = 0,
    hbm_page: int = 0,
    die_in_commit: str = "",
) -> None:
    from conftest import PAGE, make_client

    from mori.umbp import UMBPHbmConfig, UMBPSsdConfig

    if die_in_commit:
        _die_in_commit(die_in_commit)

    ssd = UMBPSsdConfig(True, ssd_dir, 64 * PAGE) if ssd_dir else None
    hbm = UMBPHbmConfig(hbm_bytes, hbm_page or PAGE) if hbm_bytes else None
    client = make_client(master_address, node_id, capacity, ssd=ssd, hbm=hbm)
    conn.send(("ready", client.peer_address))
    while True:
        cmd = conn.recv()
        if cmd[0] == "keys":
            conn.send(sorted(client.store.keys()))
        elif cmd[0] == "tiers":
            conn.send((client.store.tiers(), sorted(client.store.ssd_keys())))
        elif cmd[0] == "caps":
            conn.send(client.store.capacities())
        elif cmd[0] == "flush":
            conn.send(client.flush())
        elif cmd[0] == "drain":
            conn.send(client.store.drain_spills(20))
        elif cmd[0] == "inbound":
            status = client._engine.pop_inbound_transfer_status(cmd[1], cmd[2])
            conn.send(None if status is None else int(status.Code()))
        elif cmd[0] == "putget":  # ("putget", key, seed, size): put seeded bytes, then get the key back
            conn.send(_put_then_get(client, cmd[1], cmd[2], cmd[3]))
        elif cmd[0] == "exit":
            client.close()
            conn.send("bye")
            return


def _die_in_commit(when: str) -> None:
    import os

    from conftest import DIED_IN_COMMIT

    from mori.umbp.peer.service import PeerServicer

    commit_all = PeerServicer._commit_all

    def dying(self, entries):
        if when == "after":
            commit_all(self, entries)
        os._exit(DIED_IN_COMMIT)

    PeerServicer._commit_all = dying


def _put_then_get(client, key: str, seed: int, size: int) -> tuple[bool, bool, bytes]:
    import numpy as np

    data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
    put = client.put_from_ptr(key, data.ctypes.data, size)
    back = np.zeros(size, np.uint8)
    got = client.get_into_ptr(key, back.ctypes.data, size)
    return put, got, back.tobytes()


def hold_slot(conn, peer_address: str, secret: bytes, key: str, size: int, tier: int) -> None:
    """A writer that allocates ``key`` on a peer, says so, and never commits: the test SIGKILLs it."""
    import time

    from mori.umbp import auth, rpc

    stub = rpc.peer_grpc.UMBPPeerStub(rpc.channel(peer_address, auth.ClientAuth("doomed-writer", lambda: secret)))
    res = stub.AllocateSlot(rpc.peer_pb.AllocateSlotRequest(size=size, tier=tier, key=key), timeout=5)
    conn.send(int(res.outcome))
    time.sleep(600)
