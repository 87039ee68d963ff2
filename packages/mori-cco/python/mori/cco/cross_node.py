# SPDX-License-Identifier: MIT
"""Collectives on a communicator that spans several nodes: the node-local step of
collectives.py (load/store within the LSA team), then an exchange between nodes over the GDA path
(mori-shmem's remote transport), driven by the host.

- all_reduce: every node reduces its ranks' tensors; rank (node j, lsa l) then sends slice l of
  that node result to rank (j', l) of every other node (its rail), reduces slice l over the nodes
  in node order 0..N-1 (float32 accumulation for floating sums), and the node gathers the slices:
  every rank gets the same bits, and each element crosses between two nodes once.
- all_gather: every node gathers its ranks' inputs into its block of the output; the blocks then
  travel along the rails.
- all_to_all: the chunks for this node's ranks go through the node-local all-to-all; the chunks
  for other nodes' ranks go straight to them.

Each call puts into half (call % 2) of every receiver's inbox and raises its ARRIVED signal; a
receiver that has read its inbox raises the senders' CONSUMED signal, and a sender waits for the
CONSUMED of two calls back before it reuses that half. The host synchronises the stream around the
exchange, so these calls cannot be captured in a CUDA graph.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from mori.cco.collectives import CollectiveEngine
from mori.cco.errors import CcoTimeoutError

logger = logging.getLogger("mori.cco")

_ARRIVED = 0
_CONSUMED = 1
_MIN_AREA = 1 << 20


class CrossNodeCollectives:
    """The collectives of a communicator of several nodes (made by Communicator on first use)."""

    def __init__(self, comm: Any) -> None:
        from mori.cco.communicator import CCODevCommRequirements

        self.comm = comm
        self.world = comm.nranks
        self.nodes = comm.num_nodes
        self.lsa = comm.lsa_size
        self.node_engine = CollectiveEngine(comm)
        self.handle = comm.create_dev_comm(
            CCODevCommRequirements(gda_signal_count=2, gda_counter_count=0, lsa_barrier_count=0)
        )
        self._timeout_ns = int(self.handle.struct.spin_timeout_ns)
        self._area: Any = None  # [2 halves][slots][slot bytes] inbox, then [slots][slot bytes] outbox
        self._slots = 0
        self._slot_bytes = 0
        self._calls = 0
        # Puts so far. Every peer this rank sends to sends to it in the same call, so this is also
        # the ARRIVED count awaited, and the CONSUMED count owed back once the peers have read.
        self._sent = 0
        self._sent_after: deque[int] = deque(maxlen=2)  # self._sent after each of the last two calls

    def close(self) -> None:
        self.node_engine.close()

    # ---- the exchange ----
    def _ensure_area(self, slots: int, slot_bytes: int) -> None:
        if slots <= self._slots and slot_bytes <= self._slot_bytes:
            return
        slot_bytes = max(slot_bytes, self._slot_bytes, _MIN_AREA // max(slots, 1))
        slot_bytes = (slot_bytes + 255) // 256 * 256
        slots = max(slots, self._slots)
        if self._area is not None:
            # Every put into the old area was waited for by its receiver in an earlier call, and
            # free_mem's symmetry exchange orders this rank's last reads before anyone's reuse.
            self.comm.free_mem(self._area.local_ptr)
        self._area = self.comm.register_window(size=3 * slots * slot_bytes)
        self._slots, self._slot_bytes = slots, slot_bytes
        logger.debug("cross-node exchange area grows to 3 x %d x %d bytes", slots, slot_bytes)

    def _inbox_offset(self, half: int, slot: int) -> int:
        return (half * self._slots + slot) * self._slot_bytes

    def _outbox_offset(self, slot: int) -> int:
        return (2 * self._slots + slot) * self._slot_bytes

    def _view(self, offset: int, nbytes: int) -> Any:
        from mori.cco.tensors import tensor_at

        return tensor_at(self._area.local_ptr + offset, (nbytes,), "uint8", self.comm.device)

    def _wait(self, signal_id: int, least: int, what: str) -> None:
        """Blocks the host until this rank's signal reaches `least` (both backends: the exchange
        that follows is host work)."""
        deadline = time.monotonic() + self._timeout_ns / 1e9
        pause = 1e-5
        while (seen := self.comm.read_signal(self.handle, signal_id)) < least:
            if self._timeout_ns and time.monotonic() > deadline:
                raise CcoTimeoutError(
                    f"rank {self.comm.rank}: {what} did not arrive within {self._timeout_ns / 1e9:g} s "
                    f"(signal {signal_id} at {seen}, waiting for {least}; is a rank of another node gone?)"
                )
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    def _synchronize(self) -> None:
        self.node_engine._synchronize()

    def _slot_of(self, rank: int, by_node: bool) -> int:
        return rank // self.lsa if by_node else rank

    def _exchange(self, sends: dict[int, Any], by_node: bool) -> dict[int, Any]:
        """Puts sends[peer] (a contiguous tensor, the same byte size for every peer) into this
        rank's inbox slot at each peer and returns the inbox views by sender rank once their data is
        here. Every peer sends to this rank in the same call. Inbox slots are per node along the
        rails (by_node) and per rank otherwise."""
        import torch

        first = next(iter(sends.values()))
        nbytes = first.numel() * first.element_size()
        self._ensure_area(self.nodes if by_node else self.world, nbytes)
        my_slot = self._slot_of(self.comm.rank, by_node)
        half = self._calls % 2
        if len(self._sent_after) == 2:  # the call two back used this half
            self._wait(_CONSUMED, self._sent_after[0], "the peers' reads of an earlier call")
        for slot, tensor in enumerate(sends.values()):
            self._view(self._outbox_offset(slot), nbytes).copy_(tensor.reshape(-1).view(torch.uint8))
        self._synchronize()  # the proxy reads the outbox with its own copies
        for slot, peer in enumerate(sends):
            self.comm.gda_put(
                self.handle,
                peer,
                self._area,
                self._inbox_offset(half, my_slot),
                self._area,
                self._outbox_offset(slot),
                nbytes,
                signal_id=_ARRIVED,
                signal_value=1,
            )
        self._sent += len(sends)
        self._sent_after.append(self._sent)
        self._wait(_ARRIVED, self._sent, "the other nodes' data")
        return {peer: self._view(self._inbox_offset(half, self._slot_of(peer, by_node)), nbytes) for peer in sends}

    def _done_reading(self, peers: list[int]) -> None:
        self._synchronize()
        for peer in peers:
            self.comm.gda_signal(self.handle, peer, _CONSUMED, 1)
        self._calls += 1

    def _rail_peers(self) -> list[int]:
        me = self.comm.node
        return [node * self.lsa + self.comm.lsa_rank for node in range(self.nodes) if node != me]

    def _remote_ranks(self) -> list[int]:
        me = self.comm.node
        return [rank for rank in range(self.world) if rank // self.lsa != me]

    # ---- the collectives ----
    def all_reduce(self, tensor: Any, op: str, *, out: Any, algorithm: str, wire_dtype: Any) -> Any:
        import torch

        out = self.node_engine.all_reduce(tensor, op, out=out, algorithm=algorithm, wire_dtype=wire_dtype)
        n = out.numel()
        if n == 0:
            return out
        # Each LSA rank reduces one slice across the nodes, so each byte crosses between nodes once
        # per node pair instead of once per rank; the node then gathers the slices.
        flat = out.reshape(-1)
        slice_len = -(-n // self.lsa)
        begin = min(n, self.comm.lsa_rank * slice_len)
        mine = flat[begin : min(n, begin + slice_len)]
        # Growing the area is collective over the world, so every rank grows it, also those whose
        # slice is empty (n < lsa_size) and who sit this exchange out with their whole rail.
        self._ensure_area(self.nodes, slice_len * out.element_size())
        if mine.numel() > 0:
            peers = self._rail_peers()
            received = self._exchange({peer: mine for peer in peers}, by_node=True)
            floating = out.dtype in (torch.float32, torch.bfloat16, torch.float16)
            acc_dtype = torch.float32 if floating and op == "sum" else out.dtype
            node_results = {self.comm.node: mine}
            node_results.update({peer // self.lsa: view.view(out.dtype) for peer, view in received.items()})
            total = node_results[0].to(acc_dtype, copy=True)
            for node in range(1, self.nodes):
                part = node_results[node].to(acc_dtype)
                if op == "sum":
                    total += part
                elif op == "max":
                    torch.maximum(total, part, out=total)
                else:
                    torch.minimum(total, part, out=total)
            mine.copy_(total)
            self._done_reading(peers)
        if self.lsa > 1:
            padded = torch.zeros(slice_len, dtype=out.dtype, device=out.device)
            padded[: mine.numel()].copy_(mine)
            gathered = torch.empty(slice_len * self.lsa, dtype=out.dtype, device=out.device)
            self.node_engine.all_gather(gathered, padded)
            flat.copy_(gathered[:n])
        return out

    def all_gather(self, output: Any, input: Any) -> Any:
        self.node_engine.check_all_gather(output, input, self.world)
        if input.numel() == 0:
            return output
        flat = output.reshape(-1)
        block = self.lsa * input.numel()
        mine = flat[self.comm.node * block : (self.comm.node + 1) * block]
        self.node_engine.all_gather(mine, input)
        peers = self._rail_peers()
        received = self._exchange({peer: mine for peer in peers}, by_node=True)
        for peer, view in received.items():
            node = peer // self.lsa
            flat[node * block : (node + 1) * block].copy_(view.view(output.dtype))
        self._done_reading(peers)
        return output

    def all_to_all(self, output: Any, input: Any) -> Any:
        self.node_engine.check_all_to_all(output, input, self.world)
        chunk = input.numel() // self.world
        if chunk == 0:
            return output
        src, dst = input.reshape(-1), output.reshape(-1)
        start, stop = self.comm.node * self.lsa * chunk, (self.comm.node + 1) * self.lsa * chunk
        self.node_engine.all_to_all(dst[start:stop], src[start:stop])
        peers = self._remote_ranks()
        sends = {peer: src[peer * chunk : (peer + 1) * chunk] for peer in peers}
        received = self._exchange(sends, by_node=False)
        for peer, view in received.items():
            dst[peer * chunk : (peer + 1) * chunk].copy_(view.view(output.dtype))
        self._done_reading(peers)
        return output
