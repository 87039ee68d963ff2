# SPDX-License-Identifier: MIT
"""Copy-engine puts (MORI's SDMA path): every rank sends pages of a window to its right neighbour
on the copy-engine queues, leaving the GPU's compute units free. The receiver waits on the
per-(sender, queue) signals and checks every page.

    python copy_engine_put.py --nranks 4 [--backend cpu|cuda] [--pages 64 --page-bytes 16384]
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from _ranks import pick_backend, run_ranks

if TYPE_CHECKING:
    import torch

QUEUES = 2


def page_pattern(sender: int, page: int, page_bytes: int) -> torch.Tensor:
    import torch

    return ((torch.arange(page_bytes) + 7 * page + 131 * sender) % 251).to(torch.uint8)


def rank_main(rank: int, nranks: int, uid: bytes, backend: str, pages: int, page_bytes: int) -> None:
    import torch

    import mori.cco
    from mori.cco.tensors import tensor_at

    if backend == "cuda":
        torch.cuda.set_device(0 if torch.cuda.device_count() == 1 else rank)
    with mori.cco.Communicator.init(nranks, rank, uid, backend=backend) as comm:
        dev = comm.create_dev_comm(mori.cco.CCODevCommRequirements(sdma_queue_count=QUEUES))
        nbytes = pages * page_bytes
        src = comm.register_window(size=nbytes)
        dst = comm.register_window(size=nbytes)
        src_pages = tensor_at(src.local_ptr, (pages, page_bytes), torch.uint8, comm.device)
        dst_pages = tensor_at(dst.local_ptr, (pages, page_bytes), torch.uint8, comm.device)
        for page in range(pages):
            src_pages[page].copy_(page_pattern(rank, page, page_bytes))
        dst_pages.zero_()
        if backend == "cuda":
            torch.cuda.synchronize()
        comm.barrier()  # every rank's pages are written and its destination cleared

        right, left = (rank + 1) % nranks, (rank - 1) % nranks
        # Page p goes on queue p % QUEUES; each put bumps the receiver's signal of (us, queue).
        reached = [0] * QUEUES
        for page in range(pages):
            queue = page % QUEUES
            offset = page * page_bytes
            reached[queue] = comm.copy_engine_put(dev, right, dst, offset, src, offset, page_bytes, queue=queue)
        for queue in range(QUEUES):
            comm.copy_engine_wait(dev, left, queue, reached[queue])  # our left neighbour sent as many
        want = torch.stack([page_pattern(left, page, page_bytes) for page in range(pages)])
        assert torch.equal(dst_pages.cpu(), want), "a page arrived wrong"

        comm.copy_engine_quiet()  # our own puts are done before the windows go away
        comm.barrier()
        comm.destroy_dev_comm(dev)
        print(f"rank {rank}: SUCCESS ({pages} pages of {page_bytes} B over {QUEUES} copy-engine queues)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nranks", type=int, default=2)
    parser.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--pages", type=int, default=64)
    parser.add_argument("--page-bytes", type=int, default=16384)
    args = parser.parse_args()
    backend = pick_backend(args.backend)
    raise SystemExit(run_ranks(rank_main, args.nranks, backend, args.pages, args.page_bytes))


if __name__ == "__main__":
    main()
