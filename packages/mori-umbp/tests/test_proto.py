# SPDX-License-Identifier: MIT
"""The installed protobuf/gRPC modules (generated when the wheel was built) are exactly what the
installed .proto files produce, and those are the checkout's."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("grpc_tools", reason="grpcio-tools regenerates the modules to compare")

CHECKOUT_PROTO = Path(__file__).resolve().parents[1] / "python" / "mori" / "umbp" / "_proto"


def test_the_installed_modules_are_what_the_proto_files_generate(tmp_path):
    import mori.umbp._proto as installed_package
    from mori.umbp._proto import regen

    installed = Path(installed_package.__file__).resolve().parent
    assert installed != CHECKOUT_PROTO.resolve(), "the tests run against the installed wheel"
    for proto in regen.PROTOS:
        assert (installed / proto).read_text() == (CHECKOUT_PROTO / proto).read_text(), f"the wheel's {proto} is stale"
    written = regen.generate(tmp_path)  # from the installed .proto files
    assert {p.name for p in written} == {"umbp_pb2.py", "umbp_pb2_grpc.py", "umbp_peer_pb2.py", "umbp_peer_pb2_grpc.py"}
    for path in written:
        assert (installed / path.name).read_text() == path.read_text(), f"the wheel's {path.name} differs"


def test_wire_enums_match_the_python_enum():
    from mori.umbp import UMBPTierType
    from mori.umbp.rpc import pb

    assert {t.name: t.value for t in UMBPTierType if t.value} == {
        name: pb.TierType.Value(name) for name in ("HBM", "DRAM", "SSD")
    }
