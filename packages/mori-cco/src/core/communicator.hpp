// SPDX-License-Identifier: MIT
// A communicator: its own bootstrap group, the ranks' placement on hosts, the flat memory and its
// slot allocator, windows, dev comms and the copy engine. Every public method locks the
// communicator, so several threads may share one; methods marked COLLECTIVE follow cco.hpp's rule.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/copy_engine.hpp"
#include "core/gda_transport.hpp"
#include "core/group.hpp"
#include "core/topology.hpp"
#include "memory/flat_memory.hpp"
#include "memory/slot_allocator.hpp"
#include "mori_cco/cco.hpp"

namespace mori::cco {

class Communicator {
 public:
  // COLLECTIVE. per_rank_size 0 takes MORI_CCO_PER_RANK_VMM; device -1 takes the current one.
  Communicator(const mori_shmem_uniqueid_t& uid, int nranks, int rank, uint64_t per_rank_size, ccoBackend backend,
               int device);
  ~Communicator();

  int rank() const { return group_.rank(); }
  int nranks() const { return group_.nranks(); }
  const Topology& topology() const { return topology_; }
  FlatMemory& memory() { return *memory_; }
  uintptr_t own_slot() const { return memory_->flat_base() + topology_.lsa_rank * memory_->per_rank_size(); }

  void* alloc(uint64_t size, uint64_t alignment);  // COLLECTIVE
  void free(void* ptr);                            // COLLECTIVE
  mori_cco_window_t register_window(void* ptr, uint64_t size);  // COLLECTIVE
  void deregister_window(const mori_cco_window_t& window);
  void* peer_ptr(const void* local, int pe);
  mori_cco_dev_comm_t create_dev_comm(const ccoDevCommRequirements& reqs);  // COLLECTIVE
  void destroy_dev_comm(const mori_cco_dev_comm_t& dev_comm);              // COLLECTIVE
  uint32_t dev_comm_error(const mori_cco_dev_comm_t& dev_comm, bool clear);
  void barrier();  // COLLECTIVE

  // Copy-engine put of bytes from this rank's window src (at src_offset) into LSA peer's window dst
  // (at dst_offset) on `queue`; then bumps that peer's ce_signal[my lsa rank][queue] in dev_comm's
  // resource window. Returns the value the signal will reach, for ce_wait_signal.
  uint64_t ce_put(const mori_cco_dev_comm_t& dev_comm, int peer_lsa, int queue, const mori_cco_window_t& dst,
                  uint64_t dst_offset, const mori_cco_window_t& src, uint64_t src_offset, uint64_t bytes);
  void ce_quiet(int peer_lsa, int queue);

  // GDA from the host: one-sided transfers to and from ranks on other nodes (world ranks), the
  // same requests kernels post through dev_comm.gda_ring. signal_id -1: no signal; else the
  // peer's signal signal_id gets += signal_value once the data is there.
  void gda_put(const mori_cco_dev_comm_t& dev_comm, int peer, const mori_cco_window_t& dst, uint64_t dst_offset,
               const mori_cco_window_t& src, uint64_t src_offset, uint64_t bytes, int signal_id,
               uint64_t signal_value);
  // Copies the peer's src window bytes into this rank's dst window.
  void gda_get(int peer, const mori_cco_window_t& src, uint64_t src_offset, const mori_cco_window_t& dst,
               uint64_t dst_offset, uint64_t bytes);
  void gda_signal(const mori_cco_dev_comm_t& dev_comm, int peer, int signal_id, uint64_t value);
  uint64_t read_signal(const mori_cco_dev_comm_t& dev_comm, int signal_id);
  // Every GDA request issued before it (host threads and kernels) is applied at its target.
  void gda_flush();
  const char* gda_conduit() const { return gda_ ? gda_->conduit() : ""; }

 private:
  std::pair<uint64_t, uint64_t> block_of(const void* ptr, const char* what) const;
  void check_symmetric(const char* call, uint64_t a, uint64_t b);
  void* alloc_locked(uint64_t size, uint64_t alignment);
  void free_locked(uint64_t offset);
  void check_window(const mori_cco_window_t& window, uint64_t offset, uint64_t bytes, const char* what) const;
  void start_gda();
  GdaTransport& gda_to(int peer, const char* what) const;
  uint64_t signal_slot_offset(const mori_cco_dev_comm_t& dev_comm, int signal_id) const;

  std::mutex mutex_;
  Group group_;
  Topology topology_;
  std::unique_ptr<Group> node_group_;  // the LSA team's own group when the world spans several nodes
  std::unique_ptr<FlatMemory> memory_;
  std::unique_ptr<SlotAllocator> allocator_;
  double timeout_s_;
  std::map<uint64_t, uint64_t> windows_;     // offset -> size
  std::map<uint64_t, uint64_t> dev_comms_;   // resource offset -> ce queues
  std::unique_ptr<CopyEngine> copy_engine_;
  std::map<std::pair<uint64_t, int>, uint64_t> ce_counts_;  // (resource offset, peer * queues + queue)
  uint64_t gda_words_offset_ = 0;
  std::unique_ptr<GdaTransport> gda_;  // ranks on other nodes; null on one node
};

}  // namespace mori::cco
