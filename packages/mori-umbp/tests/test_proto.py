# SPDX-License-Identifier: MIT
"""The committed generated protobuf/gRPC modules are exactly what the .proto files produce."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("grpc_tools", reason="grpcio-tools is a development dependency")


def test_generated_code_matches_the_proto_files(tmp_path):
    from mori.umbp._proto import regen

    source = Path(__file__).resolve().parents[1] / "python"  # the checkout, not the installed copy
    written = regen.generate(tmp_path, source)
    assert {p.name for p in written} == {"umbp_pb2.py", "umbp_pb2_grpc.py", "umbp_peer_pb2.py", "umbp_peer_pb2_grpc.py"}
    for path in written:
        committed = source / "mori/umbp/_proto" / path.name
        assert committed.read_text() == path.read_text(), (
            f"{path.name} is stale: run `python -m mori.umbp._proto.regen` in packages/mori-umbp/python"
        )


def test_wire_enums_match_the_python_enum():
    from mori.umbp import UMBPTierType
    from mori.umbp.rpc import pb

    assert {t.name: t.value for t in UMBPTierType if t.value} == {
        name: pb.TierType.Value(name) for name in ("HBM", "DRAM", "SSD")
    }
