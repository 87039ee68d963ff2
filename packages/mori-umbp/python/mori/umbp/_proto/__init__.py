# SPDX-License-Identifier: MIT
"""Protobuf and gRPC code generated from this folder's .proto files (see ``regen.py``).

The modules are generated when the wheel is built (meson.build runs regen.py with grpcio-tools, a
pinned build requirement), so installing a wheel needs no protoc and the source tree holds only the
.proto files; a test checks the installed modules against the installed .proto files.
"""
