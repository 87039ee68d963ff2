# SPDX-License-Identifier: MIT
"""The settings every package shares, declared once here (the root distribution ``mori``).

Logging (MORI_LOG_LEVEL, MORI's MORI_GLOBAL_LOG_LEVEL), kernel trace points (MORI_ENABLE_PROFILER:
mori-ep and mori-viz), the JIT warm-up at import (MORI_PRECOMPILE), the ABI check of the packages
built against mori-shmem (MORI_SKIP_ABI_CHECK: mori-ep, mori-ir), MORI's SDMA switch (no effect in
mori-ep and mori-cco) and MORI's node and NIC selection (MORI_NODE_ID, MORI_RDMA_DEVICES:
mori-shmem's native library and mori-io). The native registries of mori-shmem and mori-cco declare
the ones their libraries read too, for their C users; Python lists them here only.
"""

from __future__ import annotations

from mori.settings._registry import Registry
from mori.settings._setting import Setting

#: MORI's spdlog level names and Python's (mori._logging maps them to logging levels).
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "CRITICAL", "OFF")

REGISTRY = Registry(
    "mori",
    (
        Setting(
            "MORI_LOG_LEVEL",
            "choice",
            "WARNING",
            "Log level of the `mori` logger (every package logs below it) and of the native libraries.",
            choices=LOG_LEVELS,
        ),
        Setting(
            "MORI_GLOBAL_LOG_LEVEL",
            "choice",
            "",
            "MORI's log level variable (spdlog names): used when MORI_LOG_LEVEL is not set.",
            choices=LOG_LEVELS,
        ),
        Setting(
            "MORI_ENABLE_PROFILER",
            bool,
            False,
            "Compile kernel trace points: mori.viz.jit_defines() returns MORI_VIZ_ENABLED=1 and mori-ep builds its "
            "kernels with them (needs the mori-viz wheel); op.get_debug_time_buf() then holds each call's timeline.",
        ),
        Setting(
            "MORI_PRECOMPILE",
            bool,
            False,
            "Fill the JIT cache with every declared kernel when mori is imported (MORI's switch; needs mori-shmem).",
        ),
        Setting(
            "MORI_SKIP_ABI_CHECK",
            bool,
            False,
            "Import mori-ep and mori-ir even when they were built against another mori-shmem ABI version than the "
            "one loaded (debugging only).",
        ),
        Setting(
            "MORI_ENABLE_SDMA",
            int,
            "0",
            "MORI's switch for its SDMA copy engine. Accepted with no effect (logged when not 0): mori-ep's AsyncLL "
            "moves its data through mori-shmem's transport and mori-cco's copy engine is always available "
            "(docs/user-guide/compatibility.md).",
            low=0,
        ),
        Setting(
            "MORI_NODE_ID",
            "string",
            "",
            "This process's node (co-location key) instead of the host's boot id: mori-shmem PEs with different ids "
            "use the remote transport; mori-io puts it in EngineDesc.node_id.",
        ),
        Setting(
            "MORI_RDMA_DEVICES",
            "string",
            "",
            "MORI's NIC selection: 'mlx5_0,mlx5_1' uses only these devices, '^mlx5_2' all but these (a name may carry "
            ":port). Passed to UCX as its NET_DEVICES by mori-shmem's ucx conduit and mori-io's RDMA backend; "
            "UCX_NET_DEVICES, when set, wins. Empty: every device (mori-io: only lo for an engine on loopback).",
        ),
    ),
)

get = REGISTRY.get
is_set = REGISTRY.is_set
