# SPDX-License-Identifier: MIT
"""The second process of test_gpu.py's two-process tests (module level, so spawn can import it):
an engine owning `size` bytes of host or GPU memory, driven over a pipe."""

from __future__ import annotations

from multiprocessing.connection import Connection


def target(conn: Connection, size: int, kind: str, p2p: bool, seed: int) -> None:
    """Answers ("bytes",) with the memory's content, ("inbound", key, uid) with the inbound status
    code (or None) and ("exit",) by leaving."""
    import numpy as np
    import torch

    from mori.io import BackendType, IOEngine, IOEngineConfig, TcpBackendConfig

    data = np.random.default_rng(seed).integers(0, 256, size=size, dtype=np.uint8)
    if kind == "gpu":
        memory = torch.from_numpy(data.copy()).to("cuda:0")
        torch.cuda.synchronize()
    else:
        memory = torch.from_numpy(data.copy())
    engine = IOEngine("gpu-target", IOEngineConfig())
    engine.create_backend(BackendType.TCP, TcpBackendConfig(num_data_conns=4))
    if p2p:
        engine.create_backend(BackendType.XGMI)
    desc = engine.register_torch_tensor(memory)
    conn.send((engine.get_engine_desc().pack(), desc.pack()))
    while True:
        cmd = conn.recv()
        if cmd[0] == "bytes":
            torch.cuda.synchronize()
            conn.send(memory.cpu().numpy().tobytes())
        elif cmd[0] == "inbound":
            status = engine.pop_inbound_transfer_status(cmd[1], cmd[2])
            conn.send(None if status is None else int(status.Code()))
        else:
            conn.send(True)
            break
    engine.shutdown()
