# SPDX-License-Identifier: MIT
"""Peers of mori-shmem's benchmarks: the same measurements made with other libraries.

``mori.shmem.peers.nvshmem`` builds and runs ``nvshmem_peer.cu`` (NVIDIA NVSHMEM, from the
``nvidia-nvshmem-cu13`` wheel) so that a benchmark session can put mori-shmem's numbers beside
NVSHMEM's, measured the same way on the same GPU. Nothing here is imported by ``mori.shmem``
itself, and nothing here imports torch or CUDA bindings.
"""
