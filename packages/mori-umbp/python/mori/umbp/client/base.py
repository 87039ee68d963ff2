# SPDX-License-Identifier: MIT
"""``UMBPClient``: MORI's client API, one class for both deployment modes.

``UMBPClient(config)`` builds a ``DistributedClient`` (a node of a pool: ``config.distributed``
set) or a ``LocalClient`` (in-process DRAM + SSD tiers: ``config.distributed`` None), as MORI's
``CreateUMBPClient`` does; both are UMBPClients. The argument checks live here, so both modes
raise the same typed errors before doing anything.

Data methods take raw addresses (SGLang's HostKVCache pages), which are host memory unless the
memory was registered with a CUDA device id (``register_memory(ptr, size, device_id)`` or
``register_torch_tensor``); ``put_from_tensor`` / ``get_into_tensor`` take the device from the
tensor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from mori.umbp import devmem, settings
from mori.umbp.client.config import UMBPConfig, UMBPDeploymentMode
from mori.umbp.client.external_kv import UMBPExternalKvHitCountEntry, UMBPExternalKvMatch
from mori.umbp.client.inert import check_compat
from mori.umbp.errors import ClosedError, InvalidArgumentError
from mori.umbp.types import UMBPTierType, check_key, check_keys, check_ptr, check_size


def check_lists(**lists: Sequence[Any]) -> int:
    lengths = {k: len(v) for k, v in lists.items()}
    if len(set(lengths.values())) > 1:
        raise InvalidArgumentError(f"list lengths differ: {lengths}")
    return next(iter(lengths.values()))


class UMBPClient:
    """MORI's ``UMBPClient`` API; also a context manager. Each mode's class implements every
    method that raises NotImplementedError here (``UMBPClient(config)`` never returns this class)."""

    def __new__(cls, config: UMBPConfig | None = None) -> UMBPClient:
        if cls is not UMBPClient:
            return super().__new__(cls)
        from mori.umbp.client.local_client import LocalClient
        from mori.umbp.client.pool_client import DistributedClient

        distributed = config.distributed is not None if config is not None else True
        return super().__new__(DistributedClient if distributed else LocalClient)

    def __init__(self, config: UMBPConfig | None = None) -> None:
        self._closed = False
        self._regions: list[tuple[int, int, int]] = []  # (ptr, size, device) of registered memory
        self._regions_lock = threading.Lock()

    @staticmethod
    def _accepted_config(
        config: UMBPConfig | None, *, distributed: bool, check: Callable[[UMBPConfig], None]
    ) -> UMBPConfig:
        """``config`` (the environment's for the mode when None), once the mode's own ``check`` and
        the compatibility notes (settings accepted without effect) have passed over it."""
        config = config if config is not None else UMBPConfig.from_environment(distributed=distributed)
        check(config)
        check_compat(config)
        return config

    # -- hooks of the modes -----------------------------------------------------------------------
    def _put_batch(
        self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int], depths: Sequence[int], devs: list[int]
    ) -> list[bool]:
        raise NotImplementedError(f"{type(self).__name__} must implement this")

    def _get_batch(self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int], devs: list[int]) -> list[bool]:
        raise NotImplementedError(f"{type(self).__name__} must implement this")

    def _check_fits(self, ptr: int, size: int, name: str) -> None:
        """A mode's own limit on one value (the distributed staging buffer)."""

    def _register(self, ptr: int, size: int, device: int) -> None:
        """A mode's work on registration (mori-io pinning in distributed mode)."""

    def _deregister(self, ptr: int) -> None:
        """Undoes ``_register``."""

    def _live(self) -> None:
        if self._closed:
            raise ClosedError(f"{self!r} is closed")

    # -- registered memory ------------------------------------------------------------------------
    def register_memory(self, ptr: int, size: int, device_id: int = devmem.HOST) -> bool:
        """Registers [ptr, ptr+size): host memory (``device_id`` -1, MORI's call) or memory of CUDA
        device ``device_id`` (an addition), which the data methods then read and write as such."""
        self._live()
        check_ptr(ptr)
        if isinstance(size, bool) or not isinstance(size, int) or not 0 < size < 2**63:
            raise InvalidArgumentError(f"size={size!r} must be a positive int")
        if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < devmem.HOST:
            raise InvalidArgumentError(f"device_id={device_id!r} must be -1 (host) or a CUDA ordinal")
        if device_id != devmem.HOST:
            devmem.require_cuda("device_id", device_id, device_id)
        with self._regions_lock:
            for p, s, _ in self._regions:
                if ptr < p + s and p < ptr + size:
                    raise InvalidArgumentError(f"[ptr={ptr:#x}, +{size}) overlaps registered [{p:#x}, +{s})")
        self._register(ptr, size, device_id)
        with self._regions_lock:
            self._regions.append((ptr, size, device_id))
        return True

    def register_torch_tensor(self, tensor: Any) -> bool:
        """``register_memory`` of a contiguous CPU or CUDA tensor's bytes."""
        ptr, size, device = devmem.tensor_span(tensor)
        return self.register_memory(ptr, size, device)

    def deregister_memory(self, ptr: int) -> None:
        with self._regions_lock:
            found = any(p == ptr for p, _, _ in self._regions)
            self._regions = [r for r in self._regions if r[0] != ptr]
        if found:
            self._deregister(ptr)

    def _device_of(self, ptr: int, size: int) -> int:
        with self._regions_lock:
            for p, s, device in self._regions:
                if p <= ptr and ptr + size <= p + s:
                    return device
        return devmem.HOST

    # -- MORI's data API ----------------------------------------------------------------------------
    def put_from_ptr(self, key: str, src: int, size: int) -> bool:
        """Stores ``size`` bytes at ``src`` under ``key``; first writer wins (an existing key is a
        no-op returning True). False when there is no room."""
        self._check_one(key, src, size, "src")
        return self._put_batch([key], [src], [size], [-1], [self._device_of(src, size)])[0]

    def get_into_ptr(self, key: str, dst: int, size: int) -> bool:
        """Reads ``key`` into ``dst``; False on a miss. The block must be ``size`` bytes."""
        self._check_one(key, dst, size, "dst")
        return self._get_batch([key], [dst], [size], [self._device_of(dst, size)])[0]

    def put_from_tensor(self, key: str, tensor: Any) -> bool:
        """``put_from_ptr`` of a contiguous tensor's bytes (CPU or CUDA; an addition)."""
        ptr, size, device = devmem.tensor_span(tensor)
        self._check_one(key, ptr, size, "tensor", device)
        return self._put_batch([key], [ptr], [size], [-1], [device])[0]

    def get_into_tensor(self, key: str, tensor: Any) -> bool:
        """``get_into_ptr`` into a contiguous tensor (CPU or CUDA); the block must fill it exactly."""
        ptr, size, device = devmem.tensor_span(tensor)
        self._check_one(key, ptr, size, "tensor", device)
        return self._get_batch([key], [ptr], [size], [device])[0]

    def _check_one(self, key: str, ptr: int, size: int, ptr_name: str, device: int = devmem.HOST) -> None:
        # Single-key calls name their own arguments (``size``, not ``sizes[0]``).
        self._live()
        check_key(key)
        check_ptr(ptr, ptr_name)
        check_size(size)
        self._check_fits(ptr, size, "size")

    def _check_batch(self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int]) -> list[int]:
        """Checks every key, then every pointer and size (the typed error names the first bad one),
        and returns each block's device. A batch is a prompt's chain in one registered buffer: its
        values pass at C speed, and the buffer is looked up once, not once per block."""
        check_keys(keys)
        size_limit = settings.get_int("UMBP_MAX_BLOCK_BYTES")
        with self._regions_lock:
            regions = list(self._regions)
        region: tuple[int, int, int] | None = None
        devs = []
        for i, (p, s) in enumerate(zip(ptrs, sizes, strict=True)):
            if not (type(p) is int and 0 < p < 2**64 and type(s) is int and 0 < s <= size_limit):
                check_ptr(p, f"ptrs[{i}]")
                check_size(s, f"sizes[{i}]", size_limit)
            if region is None or not (region[0] <= p and p + s <= region[0] + region[1]):
                region = next((r for r in regions if r[0] <= p and p + s <= r[0] + r[1]), None)
            if region is None:  # unregistered memory: the mode's own limit (staging) applies
                self._check_fits(p, s, f"sizes[{i}]")
                devs.append(devmem.HOST)
            else:
                devs.append(region[2])
        return devs

    def batch_put_from_ptr(self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int]) -> list[bool]:
        return self.batch_put_from_ptr_with_depth(keys, ptrs, sizes, [-1] * len(keys))

    def batch_put_from_ptr_with_depth(
        self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int], depths: Sequence[int]
    ) -> list[bool]:
        """``batch_put_from_ptr`` that also records each block's radix-chain depth (its index in
        the prompt's chain; -1: unknown), which ``prefix_aware_lru`` ranks by."""
        self._live()
        check_lists(keys=keys, ptrs=ptrs, sizes=sizes, depths=depths)
        devs = self._check_batch(keys, ptrs, sizes)
        for i, d in enumerate(depths):
            if isinstance(d, bool) or not isinstance(d, int) or not -1 <= d < 2**31:
                raise InvalidArgumentError(f"depths[{i}]={d!r} must be an int in [-1, 2**31)")
        return self._put_batch(keys, ptrs, sizes, depths, devs) if keys else []

    def batch_get_into_ptr(self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int]) -> list[bool]:
        self._live()
        check_lists(keys=keys, ptrs=ptrs, sizes=sizes)
        devs = self._check_batch(keys, ptrs, sizes)
        return self._get_batch(keys, ptrs, sizes, devs) if keys else []

    def exists(self, key: str) -> bool:
        return self.batch_exists([key])[0]

    def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        raise NotImplementedError(f"{type(self).__name__} must implement this")

    def batch_exists_consecutive(self, keys: Sequence[str]) -> int:
        """Length of the prefix of ``keys`` that exist (stops at the first miss)."""
        count = 0
        for found in self.batch_exists(keys):
            if not found:
                break
            count += 1
        return count

    def is_distributed(self) -> bool:
        return self.get_deployment_mode() == UMBPDeploymentMode.Distributed

    def get_deployment_mode(self) -> UMBPDeploymentMode:
        raise NotImplementedError(f"{type(self).__name__} must implement this")

    def flush(self) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement this")

    def clear(self) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement this")

    # -- external KV (MORI's names; the local mode has no master: nothing is reported or matched) --
    def report_external_kv_blocks(self, hashes: Sequence[str], tier: UMBPTierType) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement this")

    def revoke_external_kv_blocks(self, hashes: Sequence[str], tier: UMBPTierType) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement this")

    def revoke_all_external_kv_blocks_at_tier(self, tier: UMBPTierType) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement this")

    def match_external_kv(self, hashes: Sequence[str], count_as_hit: bool = False) -> list[UMBPExternalKvMatch]:
        raise NotImplementedError(f"{type(self).__name__} must implement this")

    def get_external_kv_hit_counts(self, hashes: Sequence[str]) -> list[UMBPExternalKvHitCountEntry]:
        raise NotImplementedError(f"{type(self).__name__} must implement this")

    # -- lifetime -------------------------------------------------------------------------------
    def close(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement this")

    def __enter__(self) -> UMBPClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
