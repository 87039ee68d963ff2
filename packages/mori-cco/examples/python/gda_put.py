# SPDX-License-Identifier: MIT
"""GDA from a kernel of your own: gda_put.cu sends every rank's bytes to its rail peer on the next
node with gda_put_signal (thread, warp and block scope), reads the next node's bytes back with
gda_get, stores a word there with gda_put_value, flushes with gda_counter and waits for its own
share. Ranks on other nodes are reached through the device
proxy over mori-shmem's remote transport.

    python gda_put.py --nranks 4 --ranks-per-node 2   # one host standing for two nodes; needs a GPU
"""

from __future__ import annotations

import argparse
import ctypes
import os
from pathlib import Path

from _ranks import run_ranks

BLOCKS = 4
BYTES = 1 << 20


def rank_main(rank: int, nranks: int, uid: bytes, ranks_per_node: int) -> None:
    os.environ["MORI_CCO_RANKS_PER_NODE"] = str(ranks_per_node)
    import torch

    import mori.cco
    from mori.cco.kernels import include_dir
    from mori.cco.tensors import tensor_at
    from mori.shmem import jit

    torch.cuda.set_device(0 if torch.cuda.device_count() == 1 else rank)
    with mori.cco.Communicator.init(nranks, rank, uid, backend="cuda") as comm:
        window = comm.register_window(size=3 * BYTES + 8 * BLOCKS)
        data = tensor_at(window.local_ptr, (3 * BYTES,), torch.uint8, comm.device)
        values = tensor_at(window.local_ptr + 3 * BYTES, (BLOCKS,), torch.int64, comm.device)
        dev = comm.create_dev_comm(mori.cco.CCODevCommRequirements(gda_signal_count=1, gda_counter_count=1))
        kernel = jit.load_module(
            Path(__file__).with_name("gda_put.cu"), include_dirs=[include_dir(), jit.include_dir()]
        ).function("gda_put")
        previous = (rank - comm.lsa_size) % nranks
        following = (rank + comm.lsa_size) % nranks

        def pattern(owner: int, scope: int) -> torch.Tensor:
            return ((torch.arange(BYTES, device=data.device) * (owner + 1) + scope) % 251).to(torch.uint8)

        for round_, scope in enumerate((0, 1, 2)):  # thread, warp, block
            data[:BYTES] = pattern(rank, scope)
            torch.cuda.synchronize()
            comm.barrier()  # every rank's data is written before anyone sends
            args = [dev.struct, window.handle, ctypes.c_uint64(BYTES), ctypes.c_uint32(round_), ctypes.c_int32(scope)]
            kernel.launch(BLOCKS, 256, args, stream=torch.cuda.current_stream())
            torch.cuda.synchronize()
            comm.check_device_error(dev)
            comm.barrier()  # every peer's kernel, and so its flush of the value it stored here, is done
            assert torch.equal(data[BYTES : 2 * BYTES], pattern(previous, scope)), f"rank {rank} scope {scope}: put"
            assert torch.equal(data[2 * BYTES :], pattern(following, scope)), f"rank {rank} scope {scope}: get"
            assert values.tolist() == [round_ + 1] * BLOCKS, f"rank {rank} scope {scope}: put_value {values.tolist()}"
            comm.barrier()  # nobody overwrites its data while a peer still reads it
        comm.destroy_dev_comm(dev)
        print(f"rank {rank}: SUCCESS ({comm.num_nodes} node(s), GDA conduit: {comm.gda_conduit or 'none'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nranks", type=int, default=2)
    parser.add_argument("--ranks-per-node", type=int, default=1, help="MORI_CCO_RANKS_PER_NODE (0: by host)")
    args = parser.parse_args()
    raise SystemExit(run_ranks(rank_main, args.nranks, args.ranks_per_node))


if __name__ == "__main__":
    main()
