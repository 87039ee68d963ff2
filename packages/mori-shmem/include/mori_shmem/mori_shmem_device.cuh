// SPDX-License-Identifier: MIT
// mori-shmem device API: the one header kernels include.
//
//   #include "mori_shmem/mori_shmem_device.cuh"     (-I mori.shmem.get_include())
//
// Header-only CUDA C++ for nvcc and NVRTC alike (no host headers needed), namespace mori::shmem,
// MORI's names. Every call takes the shmem state either explicitly as its first argument
// (a `mori_shmem_device_state_t` the kernel received by value) or implicitly from the module
// global `mori_shmem_device_state` that the host fills after loading the module; see
// device/state.cuh. The user guide is docs/user-guide/shmem-device.md.
//
//   device/codes.cuh   AMO, comparison and type codes (mirror mori_shmem.h), extra error codes
//   device/state.cuh   the state, the module global, ShmemMyPe/NPes/PtrP2p, address translation
//   device/fence.cuh   ShmemFenceThread, ShmemQuietThread
//   device/rma.cuh     put/get (nbi, blocking, typed), immediate put, put with signal
//   device/atomic.cuh  remote atomics (fetching and not), thread and warp scope
//   device/sync.cuh    wait_until / test on local words, the device barrier
//   device/copy.cuh, ptx.cuh, traits.cuh   internals
#pragma once

#include "device/codes.cuh"
#include "device/state.cuh"
#include "device/fence.cuh"
#include "device/rma.cuh"
#include "device/atomic.cuh"
#include "device/sync.cuh"
