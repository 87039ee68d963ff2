# SPDX-License-Identifier: MIT
"""A pool node in its own process: ``serve_peer`` joins the pool and serves until told to exit
(or killed). Commands over the pipe: ("keys",) lists the blocks it owns, ("exit",) closes."""

from __future__ import annotations


def serve_peer(conn, master_address: str, node_id: str, capacity: int) -> None:
    from conftest import make_client

    client = make_client(master_address, node_id, capacity)
    conn.send(("ready", client.peer_address))
    while True:
        cmd = conn.recv()
        if cmd[0] == "keys":
            conn.send(sorted(client.store.keys()))
        elif cmd[0] == "exit":
            client.close()
            conn.send("bye")
            return
