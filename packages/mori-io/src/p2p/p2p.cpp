// SPDX-License-Identifier: MIT
#include "p2p/p2p.hpp"

#include <algorithm>
#include <optional>

#include "core/error.hpp"
#include "core/log.hpp"
#include "gpu/device.hpp"

namespace mori::io::p2p {

using gpu::bind;
using gpu::device_count;
using gpu::KeepCurrentContext;
using gpu::multiprocessor_count;

namespace {

// Completion polling: spin (yielding) this long after the last progress, then sleep between
// polls, so transfers complete within microseconds of their copies and an idle backend costs no
// CPU. A sleep costs ~100 us with Linux's default timer slack, so the window outlasts copies of
// a few hundred MiB.
constexpr auto kSpinWindow = std::chrono::milliseconds(1);
constexpr auto kPollSleep = std::chrono::microseconds(50);
// With nothing in flight, how long to keep polling for the next transfer before blocking.
constexpr auto kIdleSpin = std::chrono::microseconds(200);

// Never throws: destructors and the completion thread use it (CUDA may be going away at exit).
bool try_bind(int device) {
  try {
    bind(device);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The (dst, src, size) of one run in the transfer's direction: a read copies peer -> local.
CopyDesc run_copy(bool is_read, uintptr_t local_base, uintptr_t peer, const Segment& s) {
  const uint64_t here = local_base + s.local_offset;
  const uint64_t there = peer + s.remote_offset;
  return CopyDesc{is_read ? here : there, is_read ? there : here, s.size};
}

}  // namespace

P2PBackend::P2PBackend(const P2PConfig& config) : config_(config) {
  const int devices = device_count();  // throws Error(Unsupported) naming why there is no GPU
  // Every block of the resident copier must be on the GPU at once (they wait for each other):
  // at most one per SM, on the smallest GPU.
  for (int device = 0; device < devices && config_.resident_blocks > 0; ++device) {
    const int sms = multiprocessor_count(device);
    if (config_.resident_blocks > static_cast<uint32_t>(sms)) {
      throw Error(Code::InvalidArgument, "resident_blocks=" + std::to_string(config_.resident_blocks) +
                                             " exceeds the " + std::to_string(sms) + " SMs of GPU " +
                                             std::to_string(device));
    }
  }
  completer_ = std::thread([this] { complete_loop(); });
}

P2PBackend::~P2PBackend() {
  KeepCurrentContext keep;  // may run on an application thread (the engine's last reference)
  stop();
  std::lock_guard<std::mutex> lock(state_mutex_);
  const cuda::Driver& d = cuda::driver();
  for (auto& entry : mappings_) {
    if (try_bind(entry.second.device)) d.cuIpcCloseMemHandle(entry.second.base);
  }
  for (auto& entry : devices_) {
    if (!try_bind(entry.first)) continue;
    for (auto stream : entry.second.streams) {
      d.cuStreamSynchronize(stream);
      d.cuStreamDestroy(stream);
    }
    for (auto event : entry.second.idle_events) d.cuEventDestroy(event);
    entry.second.resident.reset();  // CUDA memory and a stream: freed while their device is bound
    entry.second.slots.reset();
    entry.second.idle_tables.clear();
  }
}

void P2PBackend::stop() {
  KeepCurrentContext keep;  // runs on the application's thread
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  pending_wake_.notify_all();
  if (completer_.joinable()) completer_.join();
  {
    // The resident copiers finish what was posted to them and leave the GPU.
    std::lock_guard<std::mutex> lock(state_mutex_);
    for (auto& entry : devices_) {
      if (entry.second.resident && try_bind(entry.first)) entry.second.resident->stop();
    }
  }
  std::vector<Pending> left;
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    left.swap(pending_);
    pending_count_.store(0, std::memory_order_release);
  }
  for (Pending& op : left) {
    if (try_bind(op.device)) {
      for (auto event : op.events) cuda::driver().cuEventSynchronize(event);
      if (op.stream != nullptr) cuda::driver().cuStreamSynchronize(op.stream);
    }  // the memory is in use until then
    op.fallback = nullptr;
    finish(op, "the P2P backend was removed or the engine shut down while the transfer ran");
  }
}

P2PBackend::DeviceState& P2PBackend::device_state(int device) {
  DeviceState& state = devices_[device];
  if (state.streams.empty()) {
    const cuda::Driver& d = cuda::driver();
    bind(device);
    for (int i = 0; i < config_.num_streams; ++i) {
      cuda::CUstream stream = nullptr;
      cuda::check(d.cuStreamCreate(&stream, cuda::kStreamNonBlocking), "cuStreamCreate",
                  "creating P2P stream " + std::to_string(i) + " on GPU " + std::to_string(device));
      state.streams.push_back(stream);
    }
    for (int i = 0; i < config_.num_events; ++i) {
      cuda::CUevent event = nullptr;
      cuda::check(d.cuEventCreate(&event, cuda::kEventDisableTiming), "cuEventCreate",
                  "creating P2P events on GPU " + std::to_string(device));
      state.idle_events.push_back(event);
    }
  }
  return state;
}

uintptr_t P2PBackend::resolve(const PeerRegion& remote, int device, std::string* why) {
  const cuda::Driver& d = cuda::driver();
  if (remote.same_process) {
    // One process, one address space: the peer's pointer is usable as is; check it still is GPU
    // memory with room for the region, since the descriptor came from outside.
    cuda::CUdeviceptr base = 0;
    size_t size = 0;
    cuda::CUresult r = d.cuMemGetAddressRange(&base, &size, static_cast<cuda::CUdeviceptr>(remote.data));
    if (r != cuda::kSuccess) {
      *why = "the peer's pointer is not GPU memory of this process: " + cuda::describe(r, "cuMemGetAddressRange");
      return 0;
    }
    if (remote.size > base + size - remote.data) {
      *why = "the peer's region of " + std::to_string(remote.size) + " bytes runs past its GPU allocation";
      return 0;
    }
    return remote.data;
  }
  if (remote.ipc_handle.size() != sizeof(cuda::CUipcMemHandle)) {
    *why = "the peer's MemoryDesc carries no CUDA IPC handle (its memory could not be exported)";
    return 0;
  }
  {
    // A session posts to one peer region over and over: its mapping without building a key.
    std::lock_guard<std::mutex> lock(state_mutex_);
    const LastMapping& last = last_mapping_;
    if (last.mapping.device == device && last.mapping.engine_key == remote.engine_key &&
        last.ipc_handle == remote.ipc_handle) {
      return checked_address(last.mapping, remote, why);
    }
  }
  std::string key = remote.engine_key;
  key.push_back('\0');
  key += remote.ipc_handle;
  key += "@" + std::to_string(device);
  Mapping mapping;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    auto it = mappings_.find(key);
    if (it != mappings_.end()) {
      mapping = it->second;
    } else {
      cuda::CUipcMemHandle handle;
      std::copy(remote.ipc_handle.begin(), remote.ipc_handle.end(), handle.reserved);
      cuda::CUdeviceptr base = 0;
      cuda::CUresult r = d.cuIpcOpenMemHandle(&base, handle, cuda::kIpcLazyEnablePeerAccess);
      if (r != cuda::kSuccess) {
        *why = cuda::describe(r, "cuIpcOpenMemHandle") + " opening engine '" + remote.engine_key + "''s memory";
        return 0;
      }
      cuda::CUdeviceptr range_base = 0;
      size_t range = 0;
      r = d.cuMemGetAddressRange(&range_base, &range, base);
      if (r != cuda::kSuccess) {
        d.cuIpcCloseMemHandle(base);
        *why = cuda::describe(r, "cuMemGetAddressRange") + " on engine '" + remote.engine_key + "''s memory";
        return 0;
      }
      mapping = Mapping{base, range, device, remote.engine_key};
      mappings_[key] = mapping;
      MORI_IO_LOG(Debug, "opened " << range << " bytes of engine '" << remote.engine_key << "''s GPU memory on GPU "
                                   << device);
    }
    last_mapping_ = LastMapping{remote.ipc_handle, mapping};
  }
  return checked_address(mapping, remote, why);
}

uintptr_t P2PBackend::checked_address(const Mapping& mapping, const PeerRegion& remote, std::string* why) {
  if (remote.ipc_offset > mapping.size || remote.size > mapping.size - remote.ipc_offset) {
    *why = "the peer's region (offset " + std::to_string(remote.ipc_offset) + ", " + std::to_string(remote.size) +
           " bytes) does not fit the exported allocation of " + std::to_string(mapping.size) + " bytes";
    return 0;
  }
  return static_cast<uintptr_t>(mapping.base + remote.ipc_offset);
}

bool P2PBackend::submit(bool is_read, RegionPin local, const PeerRegion& remote, const std::vector<Segment>& segments,
                        const std::shared_ptr<TransferStatus>& status, Fallback& fallback, std::string* why) {
  const int device = local.get()->device;
  KeepCurrentContext keep;  // submit runs on the application's thread
  try {
    bind(device);
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
  const uintptr_t peer = resolve(remote, device, why);
  if (peer == 0) return false;
  const std::vector<Segment> runs = merge_runs(segments);
  const cuda::Driver& d = cuda::driver();

  Pending op;
  op.status = status;
  op.device = device;
  op.deadline = config_.op_timeout_ms > 0 ? Clock::now() + std::chrono::milliseconds(config_.op_timeout_ms)
                                          : Clock::time_point::max();
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    DeviceState* state = nullptr;
    try {
      state = &device_state(device);
    } catch (const Error& e) {
      *why = e.what();
      return false;
    }
    const size_t n = state->streams.size();
    const size_t first = state->next_stream;
    const size_t streams_used = enqueue(*state, op, is_read, local.get()->base, peer, runs, first);
    if (streams_used == 0) {
      *why = op.failure;
      return false;
    }
    state->next_stream = (first + streams_used) % n;  // the next transfer starts on fresh streams
    for (size_t i = 0; i < streams_used && !op.self_reporting(); ++i) {
      cuda::CUevent event = nullptr;
      if (!state->idle_events.empty()) {
        event = state->idle_events.back();
        state->idle_events.pop_back();
      } else if (d.cuEventCreate(&event, cuda::kEventDisableTiming) != cuda::kSuccess) {
        event = nullptr;
      }
      const bool recorded = event != nullptr && d.cuEventRecord(event, state->streams[(first + i) % n]) == cuda::kSuccess;
      if (!recorded) {
        // Without an event the copies on this stream cannot be waited for one by one: wait now.
        if (event != nullptr) state->idle_events.push_back(event);
        d.cuStreamSynchronize(state->streams[(first + i) % n]);
        if (op.failure.empty()) op.failure = "recording a completion event failed";
        continue;
      }
      op.events.push_back(event);
    }
  }
  op.pin = std::move(local);
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    if (stopping_) {
      // Nothing will complete this op: wait for its copies here and let the caller fall back.
      *why = "the P2P backend is stopping";
      for (auto event : op.events) d.cuEventSynchronize(event);
      if (op.stream != nullptr) d.cuStreamSynchronize(op.stream);
      return false;
    }
    op.fallback = std::move(fallback);
    pending_.push_back(std::move(op));
    pending_count_.store(pending_.size(), std::memory_order_release);
    last_submit_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }
  pending_wake_.notify_one();
  return true;
}

const CopyKernels* P2PBackend::copy_kernels(DeviceState& state, int device) {
  if (!state.kernels && !state.kernels_unavailable) {
    try {
      state.kernels = std::make_unique<CopyKernels>(device);
    } catch (const Error& e) {
      state.kernels_unavailable = true;
      MORI_IO_LOG(Warning, "P2P copies on GPU " << device << " fall back to cuMemcpyAsync per run: " << e.what());
      return nullptr;
    }
    try {
      state.slots = std::make_unique<CompletionSlots>(static_cast<uint32_t>(config_.num_events));
    } catch (const Error& e) {
      MORI_IO_LOG(Warning, "P2P copy kernels on GPU " << device << " report through events: " << e.what());
    }
  }
  return state.kernels.get();
}

ResidentCopier* P2PBackend::resident_copier(DeviceState& state, int device) {
  if (!state.resident && !state.resident_unavailable) {
    const CopyKernels* kernels = copy_kernels(state, device);
    try {
      if (kernels == nullptr) throw Error(Code::Unsupported, "the copy kernels did not load");
      state.resident = std::make_unique<ResidentCopier>(kernels->module(), config_.resident_blocks,
                                                        static_cast<uint32_t>(config_.num_events),
                                                        config_.resident_idle_us * 1000);
    } catch (const Error& e) {
      state.resident_unavailable = true;
      MORI_IO_LOG(Warning, "P2P on GPU " << device << " launches a kernel per transfer: " << e.what());
    }
  }
  return state.resident.get();
}

size_t P2PBackend::enqueue(DeviceState& state, Pending& op, bool is_read, uintptr_t local_base, uintptr_t peer,
                           const std::vector<Segment>& runs, size_t first) {
  const cuda::Driver& d = cuda::driver();
  const size_t n = state.streams.size();
  const int threshold = config_.scatter_gather_threshold;
  const bool batch = threshold > 0 && runs.size() >= static_cast<size_t>(threshold);
  const bool single = !batch && config_.run_kernel && runs.size() == 1;
  const CopyKernels* kernels = batch || single ? copy_kernels(state, op.device) : nullptr;
  ResidentCopier* resident = single && config_.resident_blocks > 0 ? resident_copier(state, op.device) : nullptr;
  if (resident != nullptr) {
    const CopyDesc c = run_copy(is_read, local_base, peer, runs[0]);
    if (resident->post(c.dst, c.src, c.size, &op.ticket)) {
      op.resident = resident;
      op.stream = resident->stream();
      return 1;
    }  // its ring entry is busy or it could not be launched: a launch of its own then
  }
  if (kernels != nullptr) {
    DoneSignal done;  // stays null (the kernel reports nothing) when every slot is busy: events then
    uint32_t slot = kNoSlot;
    if (state.slots && !state.slots->acquire(&slot, &done)) slot = kNoSlot;
    cuda::CUstream stream = state.streams[first % n];
    if (single) {
      const CopyDesc c = run_copy(is_read, local_base, peer, runs[0]);
      const cuda::CUresult r = kernels->launch_run(stream, c.dst, c.src, c.size, done);
      if (r != cuda::kSuccess) op.failure = cuda::describe(r, "cuLaunchKernel") + " (P2P run copy)";
    } else {
      launch_batch(state, op, *kernels, stream, is_read, local_base, peer, runs, done);
    }
    if (!op.failure.empty()) {
      if (slot != kNoSlot) state.slots->release(slot);
      return 0;
    }
    if (slot != kNoSlot) {
      op.slots = state.slots.get();
      op.slot = slot;
      op.seq = done.seq;
      op.stream = stream;
    }
    return 1;
  }
  const size_t width = std::min(n, std::max<size_t>(1, runs.size()));
  size_t enqueued = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const CopyDesc c = run_copy(is_read, local_base, peer, runs[i]);
    // cuMemcpyAsync, not DtoD: with unified addressing it also copies between two devices (and
    // within one GPU, DtoD measured no cheaper).
    cuda::CUresult r = d.cuMemcpyAsync(c.dst, c.src, c.size, state.streams[(first + i % width) % n]);
    if (r != cuda::kSuccess) {
      op.failure = cuda::describe(r, "cuMemcpyAsync");
      break;
    }
    ++enqueued;
  }
  if (enqueued == 0 && !op.failure.empty()) return 0;
  return std::max<size_t>(1, std::min(width, enqueued));
}

void P2PBackend::launch_batch(DeviceState& state, Pending& op, const CopyKernels& kernels, cuda::CUstream stream,
                              bool is_read, uintptr_t local_base, uintptr_t peer, const std::vector<Segment>& runs,
                              const DoneSignal& done) {
  std::vector<CopyDesc> copies;
  copies.reserve(runs.size());
  for (const Segment& s : runs) copies.push_back(run_copy(is_read, local_base, peer, s));
  std::unique_ptr<DescriptorTable> table;
  if (!state.idle_tables.empty()) {
    table = std::move(state.idle_tables.back());
    state.idle_tables.pop_back();
  } else {
    table = std::make_unique<DescriptorTable>();
  }
  try {
    const uint32_t pieces = table->fill(copies);
    const cuda::CUresult r = kernels.launch_batch(stream, *table, pieces, done);
    if (r != cuda::kSuccess) op.failure = cuda::describe(r, "cuLaunchKernel") + " (P2P batch copy)";
  } catch (const Error& e) {
    op.failure = e.what();
  }
  if (!op.failure.empty()) {
    state.idle_tables.push_back(std::move(table));
    return;
  }
  op.table = std::move(table);
}

void P2PBackend::finish(Pending& op, const std::string& failure) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    DeviceState& state = devices_[op.device];
    state.idle_events.insert(state.idle_events.end(), op.events.begin(), op.events.end());
    if (op.table) state.idle_tables.push_back(std::move(op.table));
    if (op.slot != kNoSlot) state.slots->release(op.slot);
  }
  op.events.clear();
  op.slot = kNoSlot;
  if (failure.empty()) {
    op.pin = RegionPin();  // the memory is no longer used: deregistration may go on
    op.status->update(StatusCode::SUCCESS, "");
    return;
  }
  if (op.fallback) {
    // Still pinned: the retry's frames pin the memory themselves before this pin goes, so a
    // deregistration cannot slip in between.
    op.fallback(failure);
  } else {
    MORI_IO_LOG(Warning, "P2P transfer failed: " << failure);
    op.status->update(StatusCode::ERR_GPU_OP, "P2P transfer failed: " + failure);
  }
  op.pin = RegionPin();
}

bool P2PBackend::ready(Pending& op, Clock::time_point now, std::string* failure) {
  *failure = op.failure;
  bool done = true;
  if (op.resident != nullptr) {
    done = op.resident->done(op.ticket);
  } else if (op.slot != kNoSlot) {
    done = op.slots->done(op.slot, op.seq);
  } else if (!op.events.empty()) {
    if (!try_bind(op.device) && failure->empty()) {
      *failure = "cannot make GPU " + std::to_string(op.device) + " current";
    }
    for (auto event : op.events) {
      cuda::CUresult r = cuda::driver().cuEventQuery(event);
      if (r == cuda::kErrorNotReady) {
        done = false;
        break;
      }
      if (r != cuda::kSuccess && failure->empty()) *failure = cuda::describe(r, "cuEventQuery");
    }
  }
  if (done || now < op.deadline) return done;
  // The copies may still run: their events, descriptors and completion slot are never reused.
  op.events.clear();
  (void)op.table.release();
  op.slot = kNoSlot;
  op.resident = nullptr;
  op.fallback = nullptr;
  *failure = "copies did not finish within op_timeout_ms=" + std::to_string(config_.op_timeout_ms);
  return true;
}

void P2PBackend::progress(const TransferStatus* status) {
  // Runs on the application's (waiting) thread, many times per wait: a transfer reporting through
  // a completion slot is checked without any driver call, so its context is left alone.
  std::optional<KeepCurrentContext> keep;
  Pending op;
  std::string failure;
  {
    // The waiter comes back in a moment: never queue behind the completion thread (a blocked lock
    // costs a futex sleep and wake, microseconds).
    std::unique_lock<std::mutex> lock(pending_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    auto it = std::find_if(pending_.begin(), pending_.end(),
                           [status](const Pending& p) { return p.status.get() == status; });
    if (it == pending_.end()) return;
    if (!it->self_reporting()) keep.emplace();  // event queries bind the transfer's device
    if (!ready(*it, Clock::now(), &failure)) return;
    op = std::move(*it);
    pending_.erase(it);
    pending_count_.store(pending_.size(), std::memory_order_release);
  }
  if (!keep && !failure.empty()) keep.emplace();  // the fallback may bind a device
  finish(op, failure);
}

void P2PBackend::complete_loop() {
  auto last_progress = Clock::now();
  std::vector<Pending> done;
  std::vector<std::string> reasons;
  for (;;) {
    if (pending_count_.load(std::memory_order_acquire) == 0) {
      // Right after a completion or a submission the next transfer usually follows within
      // microseconds (a post-then-wait loop, whose waiter completes the transfers itself): keep
      // watching through the spin window, without the lock the submitter and waiter take, so
      // that submitting needs no wake-up.
      const Clock::time_point submitted{Clock::duration(last_submit_.load(std::memory_order_relaxed))};
      if (Clock::now() - std::max(last_progress, submitted) < kIdleSpin) {
        std::this_thread::yield();
        continue;
      }
      std::unique_lock<std::mutex> lock(pending_mutex_);
      pending_wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      last_progress = Clock::now();
    }
    {
      std::unique_lock<std::mutex> lock(pending_mutex_, std::try_to_lock);
      if (!lock.owns_lock()) {  // a submitter or waiter has it, for a moment
        std::this_thread::yield();
        continue;
      }
      if (stopping_) return;
      const auto now = Clock::now();
      for (auto it = pending_.begin(); it != pending_.end();) {
        std::string failure;
        if (!ready(*it, now, &failure)) {
          ++it;
          continue;
        }
        done.push_back(std::move(*it));
        reasons.push_back(std::move(failure));
        it = pending_.erase(it);
      }
      pending_count_.store(pending_.size(), std::memory_order_release);
    }
    if (done.empty()) {
      if (Clock::now() - last_progress < kSpinWindow) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(kPollSleep);
      }
      continue;
    }
    for (size_t i = 0; i < done.size(); ++i) finish(done[i], reasons[i]);
    done.clear();
    reasons.clear();
    last_progress = Clock::now();
  }
}

void P2PBackend::synchronize_all() {
  const cuda::Driver& d = cuda::driver();
  for (auto& entry : devices_) {
    if (!try_bind(entry.first)) continue;
    for (auto stream : entry.second.streams) d.cuStreamSynchronize(stream);
  }
}

void P2PBackend::forget_engine(const std::string& engine_key) {
  KeepCurrentContext keep;  // runs on the application's thread
  std::lock_guard<std::mutex> lock(state_mutex_);
  bool any = false;
  for (auto& entry : mappings_) any = any || entry.second.engine_key == engine_key;
  if (!any) return;
  synchronize_all();  // copies in flight may still read or write the mappings
  last_mapping_ = LastMapping();
  for (auto it = mappings_.begin(); it != mappings_.end();) {
    if (it->second.engine_key == engine_key) {
      if (try_bind(it->second.device)) cuda::driver().cuIpcCloseMemHandle(it->second.base);
      it = mappings_.erase(it);
    } else {
      ++it;
    }
  }
}

bool P2PBackend::can_route(const TransferRequest& request) const {
  if (request.local->loc != MemoryLocation::GPU || request.memory->loc != MemoryLocation::GPU) return false;
  if (!request.placement.same_host) return false;
  if (!request.placement.same_process && request.memory->ipc_handle.empty()) {
    MORI_IO_LOG(Debug, "memory id " << request.memory->id << " of engine '" << request.memory->engine_key
                                    << "' has no CUDA IPC handle: not P2P");
    return false;
  }
  return true;
}

bool P2PBackend::submit(const TransferRequest& request, Fallback& fallback, std::string* why, bool* repeated) {
  *repeated = false;
  PeerRegion peer;
  peer.engine_key = request.memory->engine_key;
  peer.data = request.memory->data;
  peer.size = request.memory->size;
  peer.ipc_handle = request.memory->ipc_handle;
  peer.ipc_offset = request.memory->ipc_offset;
  peer.same_process = request.placement.same_process;
  // The waiter completes the copies it waits for itself, sparing the hand-over from the
  // completion thread. Weak: a status may outlive the backend.
  request.status->set_progress([backend = weak_from_this(), raw = request.status.get()] {
    if (auto b = backend.lock()) b->progress(raw);
  });
  return submit(request.is_read, RegionPin(request.local), peer, *request.segments, request.status, fallback, why);
}

void P2PBackend::forget_remote(const std::string& key, const std::string& reason, bool deregistered) {
  (void)reason;
  // A re-registered engine keeps its mappings: they are keyed by its allocations' IPC handles.
  if (deregistered) forget_engine(key);
}

void P2PBackend::stop(const std::string& reason) {
  (void)reason;  // P2P transfers in flight finish rather than fail
  stop();
}

}  // namespace mori::io::p2p
