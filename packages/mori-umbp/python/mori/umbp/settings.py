# SPDX-License-Identifier: MIT
"""The one registry of mori.umbp's environment variables: name, type, default and doc.

Every variable is read here and nowhere else (MORI's ``UMBP_*`` names and defaults where MORI has
one), so a variable has one name, one default and one doc; ``python -m mori.umbp env`` lists them
with their effective values. Values are read when asked for (not cached), so tests and launchers
may set them before they build a server or client.
"""

from __future__ import annotations

import os

from mori.settings import Registry, Setting
from mori.umbp.errors import ConfigError
from mori.umbp.peer.lru import POLICIES


def _parse_hex(text: str) -> str:
    if not text.strip():
        return ""
    raw = bytes.fromhex(text.strip())
    if not 16 <= len(raw) <= 256:
        raise ValueError(f"expected 16 to 256 bytes of hex, got {len(raw)} bytes")
    return text.strip()


_SPDK = "UMBPConfig.ssd.{} of from_environment() (MORI's SPDK setting; no effect here, see the compatibility page)."

REGISTRY = Registry(
    "mori-umbp",
    (
        # -- master -----------------------------------------------------------------------------------
        Setting(
            "UMBP_MASTER_LISTEN",
            "string",
            "127.0.0.1:15558",
            "host:port the master listens on (loopback unless configured; port 0 picks a free one).",
        ),
        Setting("UMBP_MASTER_ADDRESS", "string", "127.0.0.1:15558", "host:port clients reach the master at."),
        Setting(
            "UMBP_HEARTBEAT_TTL_SEC",
            "float",
            "10",
            "A node is expired after TTL x UMBP_MAX_MISSED_HEARTBEATS without a heartbeat.",
        ),
        Setting("UMBP_HEARTBEAT_INTERVAL_DIVISOR", "int", "2", "Heartbeat interval told to peers: TTL / divisor."),
        Setting("UMBP_MAX_MISSED_HEARTBEATS", "int", "3", "Missed heartbeat intervals (of TTL) before reaping."),
        Setting("UMBP_REAPER_INTERVAL_SEC", "float", "5", "How often the master looks for expired nodes."),
        Setting(
            "UMBP_EVICTION_CHECK_INTERVAL_SEC", "float", "5", "How often the master checks HBM and DRAM watermarks."
        ),
        Setting(
            "UMBP_DRAM_HIGH_WM",
            "float",
            "0.9",
            "DRAM and HBM usage fraction above which the master evicts LRU blocks (HBM blocks are demoted to "
            "the owner's DRAM); also the level a peer's on-demand eviction keeps a tier at, and the local "
            "mode's DRAM watermark.",
        ),
        Setting("UMBP_DRAM_LOW_WM", "float", "0.7", "DRAM/HBM usage fraction eviction brings a node's tier down to."),
        Setting(
            "UMBP_LEASE_DURATION_SEC",
            "float",
            "2",
            "Routing lease a RouteGet hit grants; leased keys are never eviction victims.",
        ),
        Setting(
            "UMBP_ROUTE_PUT_SELECT_ALGO",
            "choice",
            "most_available",
            "Put placement within a tier (HBM first, then DRAM): most_available (most projected free bytes) or "
            "random (weighted by free bytes).",
            choices=("most_available", "random"),
        ),
        Setting(
            "UMBP_ROUTE_PUT_NODE_AFFINITY",
            "choice",
            "none",
            "Put node affinity: none; same (a batch that fits one node and tier stays there); local (the "
            "requester's own HBM, then its DRAM, before any other node).",
            choices=("none", "same", "local"),
        ),
        Setting("UMBP_EVICTKEY_DEADLINE_MS", "int", "1000", "Deadline of the master's EvictKey RPC to a peer."),
        Setting(
            "UMBP_METADATA_BACKEND",
            "choice",
            "inmemory",
            "Where the master keeps its index: inmemory (lost on restart) or redis (shared, survives restarts).",
            choices=("inmemory", "redis"),
        ),
        Setting(
            "UMBP_REDIS_URI", "string", "redis://127.0.0.1:6379/0", "Redis store URI (UMBP_METADATA_BACKEND=redis)."
        ),
        Setting("UMBP_REDIS_NAMESPACE", "string", "default", "Key namespace: masters sharing one must share this."),
        Setting("UMBP_REDIS_SOCKET_TIMEOUT_MS", "int", "1000", "Connect and socket timeout of the Redis client."),
        Setting("UMBP_MASTER_METRICS_PORT", "int", "0", "Prometheus /metrics port of the master; 0 disables it."),
        Setting(
            "UMBP_HIT_INDEX_TTL_SEC",
            "float",
            "7200",
            "An external-KV hit counter with no hit for this long is dropped.",
        ),
        Setting("UMBP_HIT_INDEX_GC_INTERVAL_SEC", "float", "60", "How often the master drops expired hit counters."),
        Setting(
            "UMBP_HIT_QUERY_MAX_BATCH",
            "int",
            "4096",
            "Most hashes one MatchExternalKv or GetExternalKvHitCounts call may carry (INVALID_ARGUMENT above).",
        ),
        Setting("UMBP_GRPC_SHUTDOWN_DEADLINE_SEC", "float", "3", "Grace period for RPCs in flight at shutdown."),
        # -- peer / pool client -------------------------------------------------------------------------
        Setting("UMBP_DRAM_CAPACITY", "size", "4G", "Bytes of this node's DRAM tier (0: a client that owns no pages)."),
        Setting(
            "UMBP_DRAM_PAGE_SIZE",
            "size",
            "2M",
            "Page size of the DRAM tier: a distributed node's block takes whole pages; the local mode packs blocks "
            "within pages.",
        ),
        Setting(
            "UMBP_HBM_CAPACITY",
            "size",
            "0",
            "Bytes of this node's HBM tier, a CUDA tensor registered with mori-io (0: none; needs torch with CUDA).",
        ),
        Setting(
            "UMBP_DRAM_USE_HUGEPAGES",
            "bool",
            "0",
            "Back the DRAM tier with hugetlb pages of UMBP_DRAM_HUGEPAGE_SIZE (normal pages, logged, when none are "
            "reserved).",
        ),
        Setting("UMBP_DRAM_HUGEPAGE_SIZE", "size", "2M", "Hugetlb page size of the DRAM tier."),
        Setting(
            "UMBP_DRAM_NUMA_NODE",
            "int",
            "-1",
            "NUMA node the DRAM tier's memory is bound to (mbind); -1 leaves it unbound.",
        ),
        Setting("UMBP_DRAM_PREFAULT", "bool", "1", "Fault the DRAM tier's pages in when it is created."),
        Setting("UMBP_HBM_PAGE_SIZE", "size", "2M", "Page size of the HBM tier."),
        Setting("UMBP_HBM_DEVICE", "int", "0", "CUDA ordinal (as this process sees it) of the HBM tier."),
        Setting(
            "UMBP_IO_P2P",
            "bool",
            "1",
            "Create mori-io's P2P backend (BackendType.XGMI, CUDA IPC) once the node has GPU memory, so GPU <-> GPU "
            "transfers on one host skip the TCP staging.",
        ),
        Setting("UMBP_DRAM_READ_LEASE_MS", "int", "500", "Peer read lease ResolveKey takes: no eviction meanwhile."),
        Setting(
            "UMBP_PENDING_SLOT_TTL_MS",
            "int",
            "10000",
            "An allocated slot not committed within this is freed (a writer that died leaves nothing).",
        ),
        Setting(
            "UMBP_SSD_ENABLED",
            "bool",
            "0",
            "Spill committed blocks by copy to this node's SSD tier (off by default here; MORI defaults on).",
        ),
        Setting("UMBP_SSD_DIR", "string", "/tmp/umbp_ssd", "Directory of the SSD tier's block files."),
        Setting("UMBP_SSD_CAPACITY", "size", "32G", "Bytes of this node's SSD tier."),
        Setting(
            "UMBP_SSD_RECOVER",
            "bool",
            "1",
            "A (re)started node re-discovers the committed blocks in its SSD directory (torn or corrupt files are "
            "discarded) and announces them; 0: it deletes them and starts empty.",
        ),
        Setting("UMBP_SSD_HIGH_WM", "float", "0.9", "SSD usage fraction above which the peer evicts LRU blocks."),
        Setting("UMBP_SSD_LOW_WM", "float", "0.7", "SSD usage fraction the peer's eviction brings it down to."),
        Setting(
            "UMBP_SSD_STAGING_BYTES",
            "size",
            "64M",
            "Registered host buffer (16 slots) SSD blocks are staged in for remote readers; larger blocks stay "
            "DRAM-only.",
        ),
        Setting(
            "UMBP_SSD_READ_LEASE_MS",
            "int",
            "3000",
            "How long a staged SSD block stays in the staging buffer for its remote reader.",
        ),
        Setting(
            "UMBP_SSD_BACKEND",
            "choice",
            "file",
            "UMBPConfig.ssd.ssd_backend of from_environment(): file (posix), spdk or spdk_proxy; every one stores "
            "block files here. Unset with UMBP_SPDK_NVME_PCI set: spdk, as in MORI.",
            choices=("file", "posix", "spdk", "spdk_proxy"),
        ),
        Setting(
            "UMBP_ROLE",
            "choice",
            "",
            "UMBPConfig.role of from_environment(): standalone, leader or follower (a shared SSD directory). Unset: "
            "leader on local rank 0 and follower on the others when a launcher set LOCAL_RANK (or "
            "OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID), else standalone, as in MORI.",
            choices=("standalone", "leader", "follower"),
        ),
        Setting("UMBP_SPDK_BDEV", "string", "", _SPDK.format("spdk_bdev_name")),
        Setting("UMBP_SPDK_REACTOR_MASK", "string", "0x1", _SPDK.format("spdk_reactor_mask")),
        Setting("UMBP_SPDK_MEM_MB", "int", "256", _SPDK.format("spdk_mem_size_mb")),
        Setting("UMBP_SPDK_NVME_PCI", "string", "", _SPDK.format("spdk_nvme_pci_addr")),
        Setting("UMBP_SPDK_NVME_CTRL", "string", "NVMe0", _SPDK.format("spdk_nvme_ctrl_name")),
        Setting("UMBP_SPDK_IO_WORKERS", "int", "4", _SPDK.format("spdk_io_workers")),
        Setting("UMBP_SPDK_PROXY_SHM", "string", "/umbp_spdk_proxy", _SPDK.format("spdk_proxy_shm_name")),
        Setting("UMBP_SPDK_PROXY_TENANT_ID", "int", "0", _SPDK.format("spdk_proxy_tenant_id")),
        Setting("UMBP_SPDK_PROXY_TENANT_QUOTA_BYTES", "size", "0", _SPDK.format("spdk_proxy_tenant_quota_bytes")),
        Setting("UMBP_SPDK_PROXY_MAX_CHANNELS", "int", "8", _SPDK.format("spdk_proxy_max_channels")),
        Setting("UMBP_SPDK_PROXY_MAX_RANKS", "int", "8", "Older name of UMBP_SPDK_PROXY_MAX_CHANNELS."),
        Setting("UMBP_SPDK_PROXY_DATA_PER_CHANNEL_MB", "int", "32", _SPDK.format("spdk_proxy_data_per_channel_mb")),
        Setting("UMBP_SPDK_PROXY_DATA_MB", "int", "32", "Older name of UMBP_SPDK_PROXY_DATA_PER_CHANNEL_MB."),
        Setting("UMBP_SPDK_PROXY_BIN", "string", "", _SPDK.format("spdk_proxy_bin")),
        Setting("UMBP_SPDK_PROXY_TIMEOUT_MS", "int", "30000", _SPDK.format("spdk_proxy_startup_timeout_ms")),
        Setting("UMBP_SPDK_PROXY_AUTO_START", "bool", "1", _SPDK.format("spdk_proxy_auto_start")),
        Setting(
            "UMBP_SPDK_PROXY_IDLE_EXIT_TIMEOUT_MS", "int", "30000", _SPDK.format("spdk_proxy_idle_exit_timeout_ms")
        ),
        Setting("UMBP_SPDK_PROXY_ALLOW_BORROW", "bool", "0", _SPDK.format("spdk_proxy_allow_borrow")),
        Setting("UMBP_SPDK_PROXY_RESERVED_SHARED_BYTES", "size", "0", _SPDK.format("spdk_proxy_reserved_shared_bytes")),
        Setting(
            "UMBP_EVICTION_POLICY",
            "choice",
            "lru",
            "Local eviction policy (the local mode's tiers; a peer's SSD tier and its on-demand eviction of HBM "
            "and DRAM): lru, prefix_aware_lru (deepest block of the LRU tail first), or segmented_lru (blocks not "
            "read since they were put go first).",
            choices=POLICIES,
        ),
        Setting(
            "UMBP_AUTO_PROMOTE_ON_READ",
            "bool",
            "1",
            "Local mode: a get served from the SSD tier copies the block back into DRAM.",
        ),
        Setting("UMBP_MAX_BLOCK_BYTES", "size", "64M", "Largest value put_from_ptr accepts."),
        Setting("UMBP_MAX_KEY_BYTES", "int", "1024", "Longest key, in UTF-8 bytes."),
        Setting(
            "UMBP_DISTRIBUTED_STAGING_BUFFER_SIZE",
            "size",
            "64M",
            "Staging buffer for values whose memory was not register_memory'd.",
        ),
        Setting("UMBP_RPC_TIMEOUT_MS", "int", "5000", "Deadline of every client RPC to the master or a peer."),
        Setting(
            "UMBP_WIRE",
            "bool",
            "1",
            "The put and get paths' calls (and heartbeats) over one authenticated TCP connection each "
            "instead of gRPC streams (mori-umbp only; 0: gRPC for every call).",
        ),
        Setting("UMBP_TRANSFER_TIMEOUT_MS", "int", "10000", "Deadline of one mori-io transfer of a put or get."),
        Setting(
            "UMBP_COMMIT_SYNC_FLUSH",
            "bool",
            "1",
            "A commit ships its ADD event to the master before it returns, so a put is visible to every "
            "client once put returns (0: visible after the next heartbeat, as in MORI).",
        ),
        Setting(
            "UMBP_NODE_ADDRESS",
            "string",
            "127.0.0.1",
            "Address this node's peer service listens on (and its IO engine, unless UMBP_IO_ENGINE_HOST is set).",
        ),
        Setting(
            "UMBP_IO_ENGINE_HOST",
            "string",
            "",
            "Address this node's mori-io engine binds (distributed.io_engine.host); empty: the node address.",
        ),
        Setting(
            "UMBP_IO_ENGINE_PORT",
            "int",
            "0",
            "Port of this node's mori-io engine (distributed.io_engine.port); 0 picks a free one.",
        ),
        Setting("UMBP_PEER_SERVICE_PORT", "int", "0", "Port of this node's UMBPPeer service; 0 picks a free one."),
        # -- pool membership ----------------------------------------------------------------------------
        Setting(
            "UMBP_POOL_SECRET",
            "hex",
            "",
            "The pool's secret (hex, 16 to 256 bytes) every master and peer RPC proves with an HMAC. Empty: the "
            "master generates one and writes it to UMBP_POOL_SECRET_DIR, where members on its host read it.",
            parse=_parse_hex,
        ),
        Setting(
            "UMBP_POOL_SECRET_DIR",
            "string",
            "",
            "Directory (mode 0700) of the generated pool secret files, one per master port; empty: "
            "$XDG_RUNTIME_DIR/mori-umbp, else /tmp/mori-umbp-<uid>.",
        ),
        Setting(
            "UMBP_AUTH_WINDOW_MS",
            "int",
            "30000",
            "A request's signed timestamp must be within this of the receiver's clock (replays outside it are "
            "refused; inside it a nonce is accepted once).",
        ),
        Setting(
            "UMBP_MAX_PENDING_SLOTS_PER_NODE",
            "int",
            "64",
            "Pending (allocated, uncommitted) slots one node may hold on one peer; past it AllocateSlot fails "
            "with PendingLimitError.",
        ),
        Setting("UMBP_MAX_NODE_ID_BYTES", "int", "256", "Longest node id, in UTF-8 bytes."),
        Setting(
            "MORI_UMBP_LOG_LEVEL",
            "choice",
            "WARNING",
            "Level of the mori.umbp logger.",
            choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        ),
    ),
    error=ConfigError,
)


def raw(name: str) -> str:
    """The effective text of ``name``: its given value, else its default."""
    return REGISTRY.text(name)


def is_set(name: str) -> bool:
    """True when ``name`` is given a non-empty value (environment or override), not left to its default."""
    return REGISTRY.is_set(name)


def get(name: str) -> object:
    """The parsed value of ``name``, of the type its kind names."""
    return REGISTRY.get(name)


def launcher_local_rank() -> int | None:
    """The local rank a launcher (torchrun, Open MPI, Slurm, MPICH) set, None without one: MORI's
    from_environment() derives the shared-SSD role from it. These are the launcher's variables,
    not mori.umbp's, so they are not in the registry."""
    for name in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"):
        text = os.environ.get(name)
        if text is not None:
            try:
                return int(text.strip())
            except ValueError:
                raise ConfigError(f"{name}={text!r} is not an int local rank") from None
    return None


# Typed reads, for callers that want an int/str/... rather than get()'s object.
get_int = REGISTRY.get_int
get_float = REGISTRY.get_float
get_bool = REGISTRY.get_bool
get_str = REGISTRY.get_str


def entries() -> list[tuple[str, str, str, str, str]]:
    """(name, type, default, doc, effective value) of every registered variable."""
    return [(s.name, s.kind, s.default_text, s.doc, REGISTRY.text(s.name)) for s in REGISTRY]
