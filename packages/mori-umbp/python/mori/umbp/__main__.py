# SPDX-License-Identifier: MIT
"""``python -m mori.umbp env | smoke``.

``env`` prints every registered UMBP_* variable with its effective value. ``smoke`` runs a
single-node check: a master on a free loopback port and two pool clients in this process; one
puts random blocks, the other reads them back over mori-io and compares bytes.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np

from mori.umbp import settings


def _smoke(blocks: int, size: int) -> int:
    from mori.umbp import MasterServer, MasterServerConfig, UMBPClient, UMBPConfig
    from mori.umbp.client.config import UMBPDistributedConfig, UMBPDramConfig, UMBPMasterClientConfig

    t0 = time.perf_counter()
    with MasterServer(MasterServerConfig(listen_address="127.0.0.1:0")) as master:

        def node(name: str, capacity: int) -> UMBPClient:
            mc = UMBPMasterClientConfig(master.address, name, "127.0.0.1")
            return UMBPClient(UMBPConfig(UMBPDramConfig(capacity, 64 << 10), UMBPDistributedConfig(mc)))

        with node("smoke-a", blocks * size * 2) as a, node("smoke-b", 0) as b:
            rng = np.random.default_rng(0)
            data = [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(blocks)]
            keys = [f"smoke-{i:04d}" for i in range(blocks)]
            put = b.batch_put_from_ptr(keys, [d.ctypes.data for d in data], [size] * blocks)
            out = [np.zeros(size, np.uint8) for _ in range(blocks)]
            got = a.batch_get_into_ptr(keys, [o.ctypes.data for o in out], [size] * blocks)
            same = all(np.array_equal(d, o) for d, o in zip(data, out, strict=True))
    ok = all(put) and all(got) and same
    sys.stdout.write(
        f"smoke: {blocks} blocks of {size} bytes put={sum(put)} get={sum(got)} bytes_match={same} "
        f"in {time.perf_counter() - t0:.2f}s: {'OK' if ok else 'FAILED'}\n"
    )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mori.umbp", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    env = sub.add_parser("env", help="list UMBP_* variables and their values (python -m mori env's format)")
    env.add_argument("--json", action="store_true", help="print JSON instead of text")
    smoke = sub.add_parser("smoke", help="single-node master + 2 clients round trip")
    smoke.add_argument("--blocks", type=int, default=16)
    smoke.add_argument("--size", type=int, default=256 << 10)
    args = parser.parse_args(argv)
    if args.command == "env":
        from mori import _env_command

        return _env_command.main(["--json"] if args.json else [], prog="python -m mori.umbp env", package="mori-umbp")
    logging.basicConfig(level=settings.get_str("MORI_UMBP_LOG_LEVEL"))
    return _smoke(args.blocks, args.size)


if __name__ == "__main__":
    sys.exit(main())
