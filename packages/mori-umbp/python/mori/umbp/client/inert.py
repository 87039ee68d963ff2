# SPDX-License-Identifier: MIT
"""MORI's UMBP config fields that are accepted here with no effect, and the one that is refused.

Each field in ``NO_EFFECT`` has a row with the same reason in the mori-umbp section of
docs/user-guide/compatibility.md (a test keeps the two equal); a client built from a config that
sets one to a value other than MORI's default logs it once through ``mori._compat.note_no_effect``.
A field whose value would change what a get returns is not here: ``standalone_process`` (another
deployment mode) raises ConfigError, and an ``ssd.ssd_backend`` that is no block store does too.
The role fields act in the local mode (``LocalClient``) and are no-effect rows for distributed nodes.
"""

from __future__ import annotations

from typing import Any

from mori._compat import note_no_effect
from mori.umbp.client.config import UMBPConfig, UMBPDistributedConfig
from mori.umbp.errors import ConfigError

_SPDK = "there is no SPDK backend: the SSD tier is block files in ssd.storage_dir"
_COPY = (
    "SSD copies run on the tier's own spill worker (one thread, a distributed node) or inside the put "
    "(the local mode), not on a configurable copy pipeline"
)
_REMOTE = "a distributed get reads a remote block into the caller's buffer only; it is not re-cached on the reader"
_ROLE = (
    "in distributed mode (the local mode implements the shared-SSD roles): a node shares its blocks "
    "through the master, never through another process's SSD directory"
)

#: (config path, why it has no effect). Paths are relative to UMBPConfig.
NO_EFFECT: tuple[tuple[str, str], ...] = (
    ("dram.use_shared_memory", "the DRAM tier is mapped private to its process; no other process attaches to it"),
    ("dram.shm_name", "the DRAM tier is mapped private to its process; no other process attaches to it"),
    ("ssd.layout_mode", "the SSD tier writes one record file (header and CRC) per block, not segmented logs"),
    ("ssd.segment_size_bytes", "the SSD tier writes one record file (header and CRC) per block, not segmented logs"),
    ("ssd.io.backend", "SSD files are read and written with POSIX calls; there is no io_uring driver"),
    ("ssd.io.queue_depth", "SSD files are read and written with POSIX calls; there is no io_uring driver"),
    ("ssd.durability.mode", "a block file is written whole and renamed into place; there is no fsync policy to pick"),
    ("ssd.durability.enable_background_gc", "block files are deleted on eviction; there are no segments to collect"),
    ("ssd.ssd_backend", _SPDK),
    ("ssd.spdk_bdev_name", _SPDK),
    ("ssd.spdk_reactor_mask", _SPDK),
    ("ssd.spdk_mem_size_mb", _SPDK),
    ("ssd.spdk_nvme_pci_addr", _SPDK),
    ("ssd.spdk_nvme_ctrl_name", _SPDK),
    ("ssd.spdk_io_workers", _SPDK),
    ("ssd.spdk_proxy_shm_name", _SPDK),
    ("ssd.spdk_proxy_bin", _SPDK),
    ("ssd.spdk_proxy_tenant_id", _SPDK),
    ("ssd.spdk_proxy_tenant_quota_bytes", _SPDK),
    ("ssd.spdk_proxy_max_channels", _SPDK),
    ("ssd.spdk_proxy_data_per_channel_mb", _SPDK),
    ("ssd.spdk_proxy_startup_timeout_ms", _SPDK),
    ("ssd.spdk_proxy_auto_start", _SPDK),
    ("ssd.spdk_proxy_idle_exit_timeout_ms", _SPDK),
    ("ssd.spdk_proxy_allow_borrow", _SPDK),
    ("ssd.spdk_proxy_reserved_shared_bytes", _SPDK),
    ("copy_pipeline.async_enabled", _COPY),
    ("copy_pipeline.queue_depth", _COPY),
    ("copy_pipeline.worker_threads", _COPY),
    ("copy_pipeline.batch_max_ops", _COPY),
    ("role", _ROLE),
    ("follower_mode", _ROLE),
    ("force_ssd_copy_on_write", _ROLE),
    ("distributed.cache_remote_fetches", _REMOTE),
    ("distributed.cache_remote_admission", _REMOTE),
    ("distributed.admission_max_block_bytes", _REMOTE),
    (
        "distributed.master_config.auto_heartbeat",
        "a distributed client always heartbeats: its commits, evictions and liveness reach the master only that way",
    ),
)

#: ``ssd.ssd_backend`` values MORI has that store blocks (here: as files); any other is refused.
#: ``posix`` is older MORI's name of ``file`` (SGLang's UMBPStore of that time sets it).
BLOCK_STORE_BACKENDS = ("file", "posix", "spdk", "spdk_proxy")

#: Values that mean the default: no note for them.
_SAME_AS_DEFAULT = {"ssd.ssd_backend": ("posix",)}

#: Fields of NO_EFFECT that do take effect in the local mode (its shared-SSD roles).
LOCAL_MODE_EFFECTIVE = frozenset({"role", "follower_mode", "force_ssd_copy_on_write"})


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def check_compat(config: UMBPConfig) -> None:
    """Refuses what would change results, then logs each no-effect field set to a non-default value."""
    if config.standalone_process is not None:
        raise ConfigError(
            f"standalone_process={config.standalone_process!r}: MORI's standalone-process mode is not implemented "
            "here; use the local mode (distributed=None) or a distributed node"
        )
    if config.ssd.ssd_backend not in BLOCK_STORE_BACKENDS:
        raise ConfigError(f"ssd.ssd_backend={config.ssd.ssd_backend!r} is not one of {', '.join(BLOCK_STORE_BACKENDS)}")
    defaults = UMBPConfig(distributed=UMBPDistributedConfig())
    for path, reason in NO_EFFECT:
        if config.distributed is None and (path.startswith("distributed.") or path in LOCAL_MODE_EFFECTIVE):
            continue
        value = _get(config, path)
        if value != _get(defaults, path) and value not in _SAME_AS_DEFAULT.get(path, ()):
            note_no_effect(f"UMBPConfig.{path}", value, reason)
