// SPDX-License-Identifier: MIT
// The CCO device API (header-only, namespace mori::cco::device): everything a kernel needs to
// reach a communicator's memory through the mori_cco_dev_comm_t it gets by value.
//   coop.cuh     cooperative scopes: CoopThread, CoopWarp, CoopBlock
//   team.cuh     world / LSA / cross-node / rail teams and their rank maps
//   lsa.cuh      flat-VA addressing: lsa_ptr, local_ptr, peer_ptr, resource words
//   wait.cuh     the bounded spin and the error word
//   barrier.cuh  LsaBarrierSession
//   signal.cuh   put / get / put_signal, signals, counters, copy-engine signals
//   gda.cuh      gda_put / gda_put_signal / gda_put_value / gda_signal / gda_get / gda_flush /
//                gda_counter: any world rank,
//                other nodes through the device proxy
// Needs mori-shmem's include directory (mori.shmem.jit.include_dir()) on the include path.
#pragma once

#include "dev_comm.h"
#include "device/coop.cuh"
#include "device/team.cuh"
#include "device/lsa.cuh"
#include "device/wait.cuh"
#include "device/barrier.cuh"
#include "device/signal.cuh"
#include "device/gda.cuh"
