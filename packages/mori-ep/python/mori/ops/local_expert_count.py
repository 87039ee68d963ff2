"""mori.ops.local_expert_count: MORI's module of ``launch_local_expert_count`` (see mori.ep.cpp_names)."""

from __future__ import annotations

from mori.ep.cpp_names import launch_local_expert_count

__all__ = ["launch_local_expert_count"]
