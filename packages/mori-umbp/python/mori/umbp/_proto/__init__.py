# SPDX-License-Identifier: MIT
"""Protobuf and gRPC code generated from this folder's .proto files (see ``regen.py``).

The generated modules are committed, so installing mori-umbp needs no protoc; a test regenerates
them with grpcio-tools and fails if they differ from the .proto files.
"""
