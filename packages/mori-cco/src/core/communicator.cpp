// SPDX-License-Identifier: MIT
#include "core/communicator.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "core/settings.hpp"
#include "mori_shmem/device_state.h"

namespace mori::cco {

namespace {

constexpr uint64_t kMinAlignment = 256;
constexpr uint64_t kGdaWordsBytes = 256;  // the device proxy's ticket and error words

// The LSA team's own bootstrap group, which shares the slots' memory handles within the node:
// LSA rank 0 makes its unique id, the world passes it on.
std::unique_ptr<Group> join_node_group(Group& world, const Topology& topology) {
  mori_shmem_uniqueid_t uid{};
  if (topology.lsa_rank == 0) check_shmem(mori_shmem_get_unique_id(&uid), "a unique id for the node's group");
  const auto uids = world.allgather_value(uid);
  return std::make_unique<Group>(uids[topology.node_start], topology.lsa_rank, topology.lsa_size, 0.0);
}

ccoBackend resolve_backend(ccoBackend backend) {
  if (backend != ccoBackendAuto) return backend;
  const std::string choice = settings::get_choice("MORI_CCO_BACKEND");
  if (choice == "cpu") return ccoBackendCpu;
  if (choice == "cuda") return ccoBackendCuda;
  return mori_shmem_cuda_available() ? ccoBackendCuda : ccoBackendCpu;
}

uint64_t words(uint64_t n) { return n * sizeof(uint64_t); }

}  // namespace

Communicator::Communicator(const mori_shmem_uniqueid_t& uid, int nranks, int rank, uint64_t per_rank_size,
                           ccoBackend backend, int device)
    : group_(uid, rank, nranks, 0.0), timeout_s_(settings::get_seconds("MORI_CCO_TIMEOUT")) {
  topology_ = discover_topology(group_);
  const ccoBackend chosen = resolve_backend(backend);
  const auto backends = group_.allgather_value(static_cast<int>(chosen));
  for (int r = 0; r < nranks; ++r) {
    if (backends[r] != backends[0]) {
      fail(ccoSymmetryError, "rank 0 runs the ", backends[0] == ccoBackendCuda ? "cuda" : "cpu", " backend but rank ",
           r, " runs ", backends[r] == ccoBackendCuda ? "cuda" : "cpu", " (set MORI_CCO_BACKEND alike everywhere)");
    }
  }
  if (per_rank_size == 0) per_rank_size = settings::get_size("MORI_CCO_PER_RANK_VMM");
  check_symmetric("per_rank_vmm", per_rank_size, 0);
  if (topology_.num_nodes > 1) node_group_ = join_node_group(group_, topology_);
  Group& node = node_group_ ? *node_group_ : group_;
  if (chosen == ccoBackendCuda) {
    memory_ = create_vmm_memory(node, topology_.lsa_rank, topology_.lsa_size, per_rank_size, device < 0 ? 0 : device);
  } else {
    memory_ = create_shm_memory(node, topology_.lsa_rank, topology_.lsa_size, per_rank_size);
  }
  allocator_ = std::make_unique<SlotAllocator>(memory_->per_rank_size());
  if (topology_.num_nodes > 1) start_gda();
}

void Communicator::start_gda() {
  gda_words_offset_ = reinterpret_cast<uintptr_t>(alloc_locked(kGdaWordsBytes, kMinAlignment)) - own_slot();
  memory_->zero(gda_words_offset_, kGdaWordsBytes);
  std::vector<uint8_t> reach(static_cast<size_t>(nranks()));
  for (int r = 0; r < nranks(); ++r) {
    reach[r] = !topology_.on_node(r);
  }
  gda_ = std::make_unique<GdaTransport>(group_, reinterpret_cast<uint8_t*>(own_slot()), memory_->per_rank_size(),
                                        memory_->device(), reach, gda_words_offset_, timeout_s_);
}

Communicator::~Communicator() {
  gda_.reset();  // quiets: nothing of ours may still be on its way to a peer
  if (copy_engine_) {
    try {
      copy_engine_->quiet(-1, -1);
    } catch (const std::exception&) {
      // A failed queue has nothing left in flight; the memory can go.
    }
  }
}

void Communicator::check_symmetric(const char* call, uint64_t a, uint64_t b) {
  const std::array<uint64_t, 2> mine{a, b};
  const auto all = group_.allgather_value(mine);
  for (int r = 0; r < nranks(); ++r) {
    if (all[r] != all[0]) {
      fail(ccoSymmetryError, call, ": rank 0 passed (", all[0][0], ", ", all[0][1], ") but rank ", r, " passed (",
           all[r][0], ", ", all[r][1], "); collective calls need the same arguments on every rank");
    }
  }
}

void* Communicator::alloc_locked(uint64_t size, uint64_t alignment) {
  if (alignment < kMinAlignment) alignment = kMinAlignment;
  if ((alignment & (alignment - 1)) != 0) {
    fail(ccoInvalidArgument, "alignment=", alignment, " is not a power of two");
  }
  check_symmetric("alloc_mem", size, alignment);
  const auto offset = allocator_->allocate(size, alignment);
  if (!offset) {
    fail(ccoOutOfMemory, "alloc_mem(size=", size, "): the slot of ", allocator_->capacity(),
         " bytes (per_rank_vmm) has no free block that large; largest free block ", allocator_->largest_free());
  }
  try {
    memory_->commit(allocator_->high_water());
  } catch (...) {
    allocator_->release(*offset);
    throw;
  }
  return reinterpret_cast<void*>(own_slot() + *offset);
}

void* Communicator::alloc(uint64_t size, uint64_t alignment) {
  std::lock_guard<std::mutex> lock(mutex_);
  return alloc_locked(size, alignment);
}

std::pair<uint64_t, uint64_t> Communicator::block_of(const void* ptr, const char* what) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t slot = own_slot();
  if (address < slot || address >= slot + memory_->per_rank_size()) {
    fail(ccoInvalidArgument, what, "=0x", std::hex, address, " is outside this rank's slot [0x", slot, ", 0x",
         slot + memory_->per_rank_size(), ")", std::dec);
  }
  const auto block = allocator_->block_at(address - slot);
  if (!block) fail(ccoInvalidArgument, what, "=0x", std::hex, address, std::dec, " is not inside a live allocation");
  return *block;
}

void Communicator::free_locked(uint64_t offset) {
  for (auto it = windows_.begin(); it != windows_.end();) {
    const auto block = allocator_->block_at(it->first);
    it = block && block->first == offset ? windows_.erase(it) : std::next(it);
  }
  allocator_->release(offset);
}

void Communicator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t offset = reinterpret_cast<uintptr_t>(ptr) - own_slot();
  const auto block = block_of(ptr, "ptr");
  if (block.first != offset) fail(ccoInvalidArgument, "ptr is inside an allocation but does not start it");
  check_symmetric("free_mem", offset, 0);
  free_locked(offset);
}

mori_cco_window_t Communicator::register_window(void* ptr, uint64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto block = block_of(ptr, "ptr");
  const uint64_t offset = reinterpret_cast<uintptr_t>(ptr) - own_slot();
  if (size == 0 || offset + size > block.first + block.second) {
    fail(ccoInvalidArgument, "size=", size, " does not fit the allocation: ", block.first + block.second - offset,
         " bytes from ptr to its end");
  }
  check_symmetric("register_window", offset, size);
  windows_[offset] = size;
  return mori_cco_window_t{offset, size};
}

void Communicator::deregister_window(const mori_cco_window_t& window) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = windows_.find(window.offset);
  if (it == windows_.end() || it->second != window.size) {
    fail(ccoInvalidArgument, "window (offset ", window.offset, ", size ", window.size, ") is not registered");
  }
  windows_.erase(it);
}

void* Communicator::peer_ptr(const void* local, int pe) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pe < 0 || pe >= nranks()) fail(ccoInvalidArgument, "pe=", pe, " is outside [0, nranks=", nranks(), ")");
  const int peer_lsa = pe - topology_.node_start;
  if (!topology_.on_node(pe)) {
    fail(ccoInvalidArgument, "pe=", pe, " is on another node: only ranks ", topology_.node_start, "..",
         topology_.node_start + topology_.lsa_size - 1, " are reachable by load/store");
  }
  block_of(local, "local_ptr");
  const uintptr_t offset = reinterpret_cast<uintptr_t>(local) - own_slot();
  return reinterpret_cast<void*>(memory_->flat_base() + peer_lsa * memory_->per_rank_size() + offset);
}

mori_cco_dev_comm_t Communicator::create_dev_comm(const ccoDevCommRequirements& reqs) {
  if (reqs.magic != MORI_CCO_DEV_COMM_MAGIC || reqs.version != MORI_CCO_DEV_COMM_VERSION) {
    fail(ccoInvalidArgument, "reqs: magic 0x", std::hex, reqs.magic, std::dec, " version ", reqs.version,
         " is not a ccoDevCommRequirements (start from CCO_DEV_COMM_REQUIREMENTS_INITIALIZER)");
  }
  const struct {
    const char* name;
    int value;
  } counts[] = {{"lsa_barrier_count", reqs.lsaBarrierCount},
                {"gda_signal_count", reqs.gdaSignalCount},
                {"gda_counter_count", reqs.gdaCounterCount},
                {"sdma_queue_count", reqs.sdmaQueueCount}};
  for (const auto& count : counts) {
    if (count.value < 0 || count.value > (1 << 20)) {
      fail(ccoInvalidArgument, count.name, "=", count.value, " is outside [0, ", 1 << 20, "]");
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // The resource windows of all ranks must have one layout: kernels address peers' words by it.
  check_symmetric("create_dev_comm (lsa_barrier_count, gda_signal_count)",
                  static_cast<uint64_t>(reqs.lsaBarrierCount), static_cast<uint64_t>(reqs.gdaSignalCount));
  check_symmetric("create_dev_comm (gda_counter_count, sdma_queue_count)",
                  static_cast<uint64_t>(reqs.gdaCounterCount), static_cast<uint64_t>(reqs.sdmaQueueCount));
  mori_cco_dev_comm_t dc{};
  dc.magic = MORI_CCO_DEV_COMM_MAGIC;
  dc.version = MORI_CCO_DEV_COMM_VERSION;
  dc.rank = rank();
  dc.world_size = nranks();
  dc.lsa_rank = topology_.lsa_rank;
  dc.lsa_size = topology_.lsa_size;
  dc.node = topology_.node;
  dc.num_nodes = topology_.num_nodes;
  dc.node_start = topology_.node_start;
  dc.gda_connection_type = reqs.gdaConnectionType;
  dc.flat_base = memory_->flat_base();
  dc.per_rank_size = memory_->per_rank_size();
  dc.lsa_barrier_count = static_cast<uint32_t>(reqs.lsaBarrierCount);
  dc.signal_count = static_cast<uint32_t>(reqs.gdaSignalCount);
  dc.counter_count = static_cast<uint32_t>(reqs.gdaCounterCount);
  dc.ce_queue_count = static_cast<uint32_t>(reqs.sdmaQueueCount > 0 ? reqs.sdmaQueueCount
                                                                    : settings::ce_queues());
  const uint64_t lsa = static_cast<uint64_t>(dc.lsa_size);
  dc.barrier_epoch_offset = 0;
  dc.barrier_inbox_offset = dc.barrier_epoch_offset + words(dc.lsa_barrier_count);
  dc.signal_offset = dc.barrier_inbox_offset + words(dc.lsa_barrier_count * lsa);
  dc.counter_offset = dc.signal_offset + words(dc.signal_count);
  dc.ce_signal_offset = dc.counter_offset + words(dc.counter_count);
  dc.error_offset = dc.ce_signal_offset + words(lsa * dc.ce_queue_count);
  const uint64_t bytes = dc.error_offset + words(1);
  void* resource = alloc_locked(bytes, kMinAlignment);
  dc.resource = mori_cco_window_t{reinterpret_cast<uintptr_t>(resource) - own_slot(), bytes};
  memory_->zero(dc.resource.offset, bytes);
  // No peer may signal into this rank's resource window before it is zeroed.
  group_.barrier();
  dc.spin_timeout_ns = static_cast<uint64_t>(timeout_s_ * 1e9);
  dc.gda_ring = gda_ ? gda_->proxy_ring() : 0;
  dc.gda_words_offset = gda_words_offset_;
  dev_comms_[dc.resource.offset] = dc.ce_queue_count;
  return dc;
}

void Communicator::destroy_dev_comm(const mori_cco_dev_comm_t& dev_comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (dev_comms_.erase(dev_comm.resource.offset) == 0) {
    fail(ccoInvalidArgument, "dev_comm (resource offset ", dev_comm.resource.offset, ") is not live");
  }
  if (copy_engine_) copy_engine_->quiet(-1, -1);
  check_symmetric("dev_comm_destroy", dev_comm.resource.offset, 0);
  free_locked(dev_comm.resource.offset);
}

uint32_t Communicator::dev_comm_error(const mori_cco_dev_comm_t& dev_comm, bool clear) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (dev_comms_.count(dev_comm.resource.offset) == 0) {
    fail(ccoInvalidArgument, "dev_comm (resource offset ", dev_comm.resource.offset, ") is not live");
  }
  const uint64_t offset = dev_comm.resource.offset + dev_comm.error_offset;
  uint64_t word = memory_->read_word(offset);
  if (clear) memory_->zero(offset, sizeof(uint64_t));
  if (word == MORI_CCO_ERR_NONE && gda_) {
    // The proxy's own error word: a GDA request that failed at the transport.
    const uint64_t error_offset = gda_words_offset_ + MORI_SHMEM_SYNC_ERROR_OFFSET;
    const uint64_t proxy_error = memory_->read_word(error_offset) & 0xffffffffu;
    if (proxy_error != 0) word = MORI_CCO_ERR_GDA;
    if (clear && proxy_error != 0) memory_->zero(error_offset, sizeof(uint32_t));
  }
  return static_cast<uint32_t>(word);
}

void Communicator::barrier() {
  std::lock_guard<std::mutex> lock(mutex_);
  group_.barrier();
}

void Communicator::check_window(const mori_cco_window_t& window, uint64_t offset, uint64_t bytes,
                                const char* what) const {
  const auto it = windows_.find(window.offset);
  if (it == windows_.end() || it->second != window.size) {
    fail(ccoInvalidArgument, what, " (offset ", window.offset, ", size ", window.size, ") is not a registered window");
  }
  if (offset > window.size || bytes > window.size - offset) {
    fail(ccoInvalidArgument, what, ": ", bytes, " bytes at offset ", offset, " run past its size ", window.size);
  }
}

uint64_t Communicator::ce_put(const mori_cco_dev_comm_t& dev_comm, int peer_lsa, int queue,
                              const mori_cco_window_t& dst, uint64_t dst_offset, const mori_cco_window_t& src,
                              uint64_t src_offset, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto live = dev_comms_.find(dev_comm.resource.offset);
  if (live == dev_comms_.end()) fail(ccoInvalidArgument, "dev_comm is not live");
  if (peer_lsa < 0 || peer_lsa >= topology_.lsa_size) {
    fail(ccoInvalidArgument, "peer=", peer_lsa, " is outside [0, lsa_size=", topology_.lsa_size, ")");
  }
  const int queues = static_cast<int>(live->second);
  if (queue < 0 || queue >= queues) fail(ccoInvalidArgument, "queue=", queue, " is outside [0, ", queues, ")");
  check_window(dst, dst_offset, bytes, "dst window");
  check_window(src, src_offset, bytes, "src window");
  if (!copy_engine_) {
    const int most = static_cast<int>(settings::ce_queues());
    const int engine_queues = std::max(queues, most);
    copy_engine_ = std::string(memory_->backend()) == "cpu"
                       ? create_thread_copy_engine(topology_.lsa_size, engine_queues)
                       : create_stream_copy_engine(memory_->device(), topology_.lsa_size, engine_queues);
  }
  if (queue >= copy_engine_->queues()) {
    fail(ccoInvalidArgument, "queue=", queue, " is outside the copy engine's ", copy_engine_->queues(),
         " queues (the first dev comm that used it fixed them)");
  }
  const uintptr_t peer_slot = memory_->flat_base() + peer_lsa * memory_->per_rank_size();
  const uint64_t value = ++ce_counts_[{dev_comm.resource.offset, peer_lsa * queues + queue}];
  const uintptr_t signal = peer_slot + dev_comm.resource.offset + dev_comm.ce_signal_offset +
                           words(static_cast<uint64_t>(topology_.lsa_rank) * dev_comm.ce_queue_count + queue);
  copy_engine_->put(peer_lsa, queue, peer_slot + dst.offset + dst_offset, own_slot() + src.offset + src_offset, bytes,
                    signal, value);
  return value;
}

void Communicator::ce_quiet(int peer_lsa, int queue) {
  CopyEngine* engine = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    engine = copy_engine_.get();
  }
  if (engine != nullptr) engine->quiet(peer_lsa, queue);
}

GdaTransport& Communicator::gda_to(int peer, const char* what) const {
  if (peer < 0 || peer >= group_.nranks()) {
    fail(ccoInvalidArgument, what, ": peer=", peer, " is outside [0, nranks=", group_.nranks(), ")");
  }
  if (topology_.on_node(peer)) {
    fail(ccoInvalidArgument, what, ": peer=", peer, " shares this rank's node (ranks ", topology_.node_start, "..",
         topology_.node_start + topology_.lsa_size - 1, "); reach it by load/store (get_peer_ptr, device put)");
  }
  return *gda_;  // non-null: a peer on another node means several nodes
}

uint64_t Communicator::signal_slot_offset(const mori_cco_dev_comm_t& dev_comm, int signal_id) const {
  if (dev_comms_.count(dev_comm.resource.offset) == 0) {
    fail(ccoInvalidArgument, "dev_comm (resource offset ", dev_comm.resource.offset, ") is not live");
  }
  if (signal_id < 0 || static_cast<uint32_t>(signal_id) >= dev_comm.signal_count) {
    fail(ccoInvalidArgument, "signal_id=", signal_id, " is outside [0, gda_signal_count=", dev_comm.signal_count, ")");
  }
  return dev_comm.resource.offset + dev_comm.signal_offset + words(static_cast<uint64_t>(signal_id));
}

void Communicator::gda_put(const mori_cco_dev_comm_t& dev_comm, int peer, const mori_cco_window_t& dst,
                           uint64_t dst_offset, const mori_cco_window_t& src, uint64_t src_offset, uint64_t bytes,
                           int signal_id, uint64_t signal_value) {
  GdaTransport* gda = nullptr;
  uint64_t signal_offset = UINT64_MAX;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    gda = &gda_to(peer, "gda_put");
    check_window(dst, dst_offset, bytes, "dst window");
    check_window(src, src_offset, bytes, "src window");
    if (signal_id != -1) signal_offset = signal_slot_offset(dev_comm, signal_id);
  }
  // Unlocked: the transfer may take long, and the transport serves several threads.
  gda->put(peer, dst.offset + dst_offset, reinterpret_cast<const void*>(own_slot() + src.offset + src_offset), bytes,
           signal_offset, signal_value);
}

void Communicator::gda_get(int peer, const mori_cco_window_t& src, uint64_t src_offset, const mori_cco_window_t& dst,
                           uint64_t dst_offset, uint64_t bytes) {
  GdaTransport* gda = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    gda = &gda_to(peer, "gda_get");
    check_window(src, src_offset, bytes, "src window");
    check_window(dst, dst_offset, bytes, "dst window");
  }
  gda->get(peer, src.offset + src_offset, reinterpret_cast<void*>(own_slot() + dst.offset + dst_offset), bytes);
}

void Communicator::gda_signal(const mori_cco_dev_comm_t& dev_comm, int peer, int signal_id, uint64_t value) {
  GdaTransport* gda = nullptr;
  uint64_t offset = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    gda = &gda_to(peer, "gda_signal");
    offset = signal_slot_offset(dev_comm, signal_id);
  }
  gda->signal_add(peer, offset, value);
}

uint64_t Communicator::read_signal(const mori_cco_dev_comm_t& dev_comm, int signal_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  return memory_->read_word(signal_slot_offset(dev_comm, signal_id));
}

void Communicator::gda_flush() {
  if (gda_) gda_->quiet();
}

}  // namespace mori::cco
