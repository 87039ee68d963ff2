# SPDX-License-Identifier: MIT
"""A pool node in its own process: ``serve_peer`` joins the pool and serves until told to exit
(or killed). Commands over the pipe: ("keys",) the blocks it owns in page tiers, ("tiers",)
{key: tier} of its page blocks and its SSD keys, ("caps",) its tier capacities, ("flush",) a
heartbeat now, ("drain",) waits for its spills, ("inbound",
engine key, uid) the inbound status code of a transfer (None: none, as after P2P), ("exit",)."""

from __future__ import annotations


def serve_peer(
    conn, master_address: str, node_id: str, capacity: int, ssd_dir: str = "", hbm_bytes: int = 0, hbm_page: int = 0
) -> None:
    from conftest import PAGE, make_client

    from mori.umbp import UMBPHbmConfig, UMBPSsdConfig

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
        elif cmd[0] == "exit":
            client.close()
            conn.send("bye")
            return
