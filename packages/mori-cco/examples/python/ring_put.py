# SPDX-License-Identifier: MIT
"""A kernel of your own on a communicator: ring_put.cu moves every rank's bytes to the next rank
with put_signal at thread, warp and block scope, then meets the peers at an LSA barrier.

    python ring_put.py --nranks 4      # needs a GPU; several ranks share one GPU under MPS
"""

from __future__ import annotations

import argparse
import ctypes
from pathlib import Path

from _ranks import run_ranks

BLOCKS = 8
BYTES = 1 << 20


def rank_main(rank: int, nranks: int, uid: bytes) -> None:
    import torch

    import mori.cco
    from mori.cco.kernels import include_dir
    from mori.cco.tensors import tensor_at
    from mori.shmem import jit

    torch.cuda.set_device(0 if torch.cuda.device_count() == 1 else rank)
    with mori.cco.Communicator.init(nranks, rank, uid, backend="cuda") as comm:
        window = comm.register_window(size=2 * BYTES)
        data = tensor_at(window.local_ptr, (2 * BYTES,), torch.uint8, comm.device)
        dev = comm.create_dev_comm(mori.cco.CCODevCommRequirements(lsa_barrier_count=BLOCKS, gda_signal_count=1))
        kernel = jit.load_module(
            Path(__file__).with_name("ring_put.cu"), include_dirs=[include_dir(), jit.include_dir()]
        ).function("ring_put")
        previous = (rank - 1) % nranks
        for round_, scope in enumerate((0, 1, 2)):  # thread, warp, block
            data[:BYTES] = (torch.arange(BYTES, device=data.device) * (rank + 1) + scope) % 251
            comm.barrier()  # every rank's data is written before anyone sends
            args = [dev.struct, window.handle, ctypes.c_uint64(BYTES), ctypes.c_uint32(round_), ctypes.c_int32(scope)]
            kernel.launch(BLOCKS, 256, args, stream=torch.cuda.current_stream())
            torch.cuda.synchronize()
            comm.check_device_error(dev)
            expect = (torch.arange(BYTES, device=data.device) * (previous + 1) + scope) % 251
            assert torch.equal(data[BYTES:], expect.to(torch.uint8)), f"rank {rank} scope {scope}: wrong bytes"
        comm.destroy_dev_comm(dev)
        print(f"rank {rank}: SUCCESS")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nranks", type=int, default=2)
    args = parser.parse_args()
    raise SystemExit(run_ranks(rank_main, args.nranks))


if __name__ == "__main__":
    main()
