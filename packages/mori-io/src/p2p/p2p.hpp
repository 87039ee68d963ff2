// SPDX-License-Identifier: MIT
// The P2P backend (MORI's BackendType.XGMI; on NVIDIA GPUs the intra-host path is NVLink or PCIe
// peer-to-peer): GPU memory of two engines on one host, copied by the GPU's copy engines with no
// socket in between. The peer's region is opened once per allocation with cuIpcOpenMemHandle (an
// engine in the same process uses the pointer directly); a transfer's contiguous runs are spread
// over several of this backend's streams, and one completion thread turns their events into the
// transfer's status. MORI completes XGMI transfers lazily on Code(); here the thread does it, so
// Wait() needs no CUDA call and the GIL-free waits of the TCP backend work unchanged.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "core/segment.hpp"
#include "core/status.hpp"
#include "gpu/copy_kernels.hpp"
#include "gpu/cuda_driver.hpp"
#include "gpu/resident.hpp"

namespace mori::io::p2p {

// The GPU helpers this backend is built from (gpu/).
using gpu::CompletionSlots;
using gpu::CopyDesc;
using gpu::CopyKernels;
using gpu::DescriptorTable;
using gpu::DoneSignal;
using gpu::ResidentCopier;

struct P2PConfig {
  int num_streams = 64;  // MORI's XgmiBackendConfig names
  int num_events = 64;   // events made up front per device; more are made when all are in use
  int64_t op_timeout_ms = 30000;
  // A transfer of at least this many separate runs is copied by one kernel launch instead of one
  // cuMemcpyAsync per run (MORI_IO_XGMI_SCATTER_GATHER_THRESHOLD); 0 never uses the kernel.
  int scatter_gather_threshold = 16;
  // A transfer of one contiguous run is copied by mori-io's run kernel, which reports completion
  // through host memory; false copies it with cuMemcpyAsync (between GPUs the copy engines do
  // that work, leaving the SMs to compute kernels) and waits on an event.
  bool run_kernel = true;
  // Blocks of the resident copier (resident.hpp) that takes one-run transfers without a launch;
  // 0 launches per transfer. It leaves the GPU after resident_idle_us without work.
  uint32_t resident_blocks = 0;
  uint64_t resident_idle_us = 200;
};

// What the initiator knows of the peer's GPU region (from its MemoryDesc and EngineDesc).
struct PeerRegion {
  std::string engine_key;
  uintptr_t data = 0;
  uint64_t size = 0;
  std::string ipc_handle;  // of the allocation that holds the region
  uint64_t ipc_offset = 0;  // data - allocation base
  bool same_process = false;
};

class P2PBackend : public Backend, public std::enable_shared_from_this<P2PBackend> {
 public:
  using Clock = std::chrono::steady_clock;

  explicit P2PBackend(const P2PConfig& config);  // throws Error(Unsupported) without driver or GPU
  ~P2PBackend() override;
  P2PBackend(const P2PBackend&) = delete;
  P2PBackend& operator=(const P2PBackend&) = delete;

  // Backend. The pair goes P2P when both sides are GPU memory, the peer runs on this host, and
  // it is this process or exported its region with a CUDA IPC handle.
  BackendType type() const override { return BackendType::XGMI; }
  bool can_route(const TransferRequest& request) const override;
  bool submit(const TransferRequest& request, Fallback& fallback, std::string* why, bool* repeated) override;
  void forget_remote(const std::string& key, const std::string& reason, bool deregistered) override;
  void stop(const std::string& reason) override;

  // Enqueues one transfer between the local GPU region and the peer's. Returns false with *why
  // when nothing could be enqueued (no byte moved: the caller falls back; `fallback` is left to
  // it, not called). Once it returns true (having taken `fallback`) the status completes SUCCESS,
  // or `fallback` is called (from the completion thread, with `local` still pinned) with the
  // reason of a failure.
  bool submit(bool is_read, RegionPin local, const PeerRegion& remote, const std::vector<Segment>& segments,
              const std::shared_ptr<TransferStatus>& status, Fallback& fallback, std::string* why);
  // Completes the pending transfer reporting into `status` if its copies have finished, on the
  // calling thread (a waiter's progress hook); does nothing when they have not, or when the
  // transfer is no longer pending.
  void progress(const TransferStatus* status);
  // Closes the IPC mappings of a peer engine (after the copies in flight finish).
  void forget_engine(const std::string& engine_key);
  // Finishes the transfers in flight (waiting for their copies) and stops the completion thread.
  void stop();

 private:
  struct Mapping {
    cuda::CUdeviceptr base = 0;
    uint64_t size = 0;
    int device = -1;
    std::string engine_key;
  };
  struct DeviceState {
    std::vector<cuda::CUstream> streams;
    std::vector<cuda::CUevent> idle_events;
    size_t next_stream = 0;
    std::unique_ptr<CopyKernels> kernels;
    bool kernels_unavailable = false;  // the PTX did not load: cuMemcpyAsync only
    std::unique_ptr<CompletionSlots> slots;  // null: the kernels' completion is waited for with events
    std::unique_ptr<ResidentCopier> resident;
    bool resident_unavailable = false;
    std::vector<std::unique_ptr<DescriptorTable>> idle_tables;
  };
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  struct Pending {
    std::shared_ptr<TransferStatus> status;
    RegionPin pin;
    int device = -1;
    std::vector<cuda::CUevent> events;
    std::chrono::steady_clock::time_point deadline;
    Fallback fallback;
    std::string failure;  // set when enqueueing stopped part-way
    std::unique_ptr<DescriptorTable> table;  // the kernel's descriptors, read until it finishes
    // A kernel launch that reports through a completion slot instead of events.
    const CompletionSlots* slots = nullptr;
    uint32_t slot = kNoSlot;
    uint64_t seq = 0;
    // A copy handed to the resident copier, reported through its ring entry.
    const ResidentCopier* resident = nullptr;
    uint64_t ticket = 0;
    cuda::CUstream stream = nullptr;  // of a self-reporting copy: what waits for it at shutdown
    // Whether the copy reports its own completion through host memory (no events).
    bool self_reporting() const { return slot != kNoSlot || resident != nullptr; }
  };

  // The peer region's address in this process, for copies on `device`; 0 with *why on failure.
  uintptr_t resolve(const PeerRegion& remote, int device, std::string* why);
  // The region's address in an opened mapping; 0 with *why when the region does not fit it.
  static uintptr_t checked_address(const Mapping& mapping, const PeerRegion& remote, std::string* why);
  DeviceState& device_state(int device);  // state_mutex_ held
  // The copy kernels of device (and its completion slots), loaded on first use; null when they
  // cannot load (logged once).
  const CopyKernels* copy_kernels(DeviceState& state, int device);  // state_mutex_ held
  // The device's resident copier, made on first use; null when disabled or unavailable.
  ResidentCopier* resident_copier(DeviceState& state, int device);  // state_mutex_ held
  // Enqueues copies of every run, spread over up to `width` streams from `first`, or as one kernel
  // launch; returns how many streams carry work (whose completion events the caller records,
  // unless the launch armed op.slot). Sets op.failure when enqueueing stopped early.
  size_t enqueue(DeviceState& state, Pending& op, bool is_read, uintptr_t local_base, uintptr_t peer,
                 const std::vector<Segment>& runs, size_t first);  // state_mutex_ held
  // Fills a descriptor table with the runs and launches the batch kernel over it (op keeps the
  // table); sets op.failure when that fails.
  void launch_batch(DeviceState& state, Pending& op, const CopyKernels& kernels, cuda::CUstream stream, bool is_read,
                    uintptr_t local_base, uintptr_t peer, const std::vector<Segment>& runs,
                    const DoneSignal& done);  // state_mutex_ held
  void complete_loop();
  // Whether op's copies are done (or failed, or past their deadline, which *failure then says);
  // pending_mutex_ held.
  bool ready(Pending& op, Clock::time_point now, std::string* failure);
  void finish(Pending& op, const std::string& failure);
  void synchronize_all();

  P2PConfig config_;
  std::mutex state_mutex_;  // devices_, mappings_
  std::map<int, DeviceState> devices_;
  std::map<std::string, Mapping> mappings_;  // engine key + handle + device -> opened mapping
  struct LastMapping {
    std::string ipc_handle;
    Mapping mapping;  // its engine key and device complete the key
  };
  LastMapping last_mapping_;  // the mapping resolved last (state_mutex_)

  std::mutex pending_mutex_;
  std::condition_variable pending_wake_;
  std::vector<Pending> pending_;
  bool stopping_ = false;
  // Read by the completion thread without the lock: how many transfers are pending, and when the
  // last was submitted (Clock ticks), which keeps it watching while transfers keep coming.
  std::atomic<size_t> pending_count_{0};
  std::atomic<Clock::rep> last_submit_{0};
  std::thread completer_;
};

}  // namespace mori::io::p2p
