// SPDX-License-Identifier: MIT
#include "remote/device_proxy.hpp"

#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/back_off.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "mori_shmem/device_state.h"
#include "remote/put_batch.hpp"

namespace mori::shmem::remote {

namespace {

// Kernels read both in one 16-byte load (ProxyHeadOf in device/proxy.cuh).
static_assert(offsetof(mori_shmem_proxy_ring_t, features) == offsetof(mori_shmem_proxy_ring_t, device_words) + 8 &&
                  offsetof(mori_shmem_proxy_ring_t, device_words) % 16 == 0,
              "the ring's device_words and features must be one aligned 16-byte pair");

uint64_t load_acquire(const unsigned long long* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
void store_release(unsigned long long* word, uint64_t value) { __atomic_store_n(word, value, __ATOMIC_RELEASE); }

// Spin while requests keep coming, then yield, then nap: an idle proxy costs little CPU, a busy
// one answers within a microsecond or two.
constexpr uint64_t kNapAfterRounds = 20000;
void idle_back_off(uint64_t idle_rounds) { back_off(idle_rounds, 4000, kNapAfterRounds); }

}  // namespace

DeviceProxy::DeviceProxy(const cuda::DeviceContext& context, Conduit& conduit, GpuRemoteIo& io,
                         uint8_t* sync_words, int rank, double timeout_s)
    : context_(context),
      conduit_(conduit),
      io_(io),
      sync_words_(sync_words),
      rank_(rank),
      timeout_s_(timeout_s),
      ring_buffer_(context, sizeof(mori_shmem_proxy_ring_t)),
      ring_(reinterpret_cast<mori_shmem_proxy_ring_t*>(ring_buffer_.host())),
      // ring_buffer_'s construction made the primary context current, for the zeroing.
      device_words_block_(context.ordinal(), sizeof(mori_shmem_proxy_words_t), "the device proxy's GPU words"),
      device_words_(device_words_block_.address()) {
  std::memset(ring_, 0, sizeof(*ring_));
  ring_->device_words = device_words_;
  ring_->features = MORI_SHMEM_PROXY_FEATURE_INLINE;
  thread_ = std::thread([this] { run(); });
}

DeviceProxy::~DeviceProxy() {
  stopping_.store(true);
  if (thread_.joinable()) thread_.join();
  try {
    context_.wait_posted_words();  // the last ones land before their memory goes
  } catch (const std::exception& e) {
    log::emit(log::Level::Warning, "PE ", rank_, " device proxy: ", e.what());
  }
  if (next_.load() > 0) {
    log::emit(log::Level::Debug, "PE ", rank_, " device proxy: ", times_.summary(), "; batches held ",
              batched_requests_, " requests in ", batch_transfers_, " transfers");
  }
}

void DeviceProxy::run() {
  // Everything this thread asks of CUDA runs in the work context: current for the thread's life,
  // so that the WorkScope of each copy and posted word finds it current and switches nothing.
  const cuda::DeviceContext::WorkScope work(context_);
  uint64_t head = 0;
  uint64_t idle = 0;
  uint64_t last_done_ns = 0;  // 0: no request yet, or the last one was long ago (the proxy napped)
  while (!stopping_.load(std::memory_order_relaxed)) {
    const uint64_t ticket = next_.load(std::memory_order_relaxed);
    mori_shmem_proxy_entry_t& entry = ring_->entries[ticket % MORI_SHMEM_PROXY_RING_ENTRIES];
    if (load_acquire(&entry.state) == ticket + 1) {
      const uint64_t start_ns = monotonic_ns();
      if (last_done_ns != 0) times_.add(kWaitPhase, start_ns - last_done_ns);
      const unsigned op = entry.op < kWaitPhase ? entry.op : 0;
      uint64_t end = ticket + 1;
      if (batchable(entry.op)) {
        end = execute_batch(ticket);
      } else {
        execute(entry, ticket);
      }
      last_done_ns = monotonic_ns();
      times_.add(op, last_done_ns - start_ns);
      next_.store(end, std::memory_order_release);
      publish(offsetof(mori_shmem_proxy_words_t, done), end);
      idle = 0;
    } else {
      idle_back_off(++idle);
      if (idle == kNapAfterRounds) last_done_ns = 0;  // kernels stopped posting: not a wait
    }
    // Slots free again once carried out (or, for an answer, once the kernel has read it).
    const uint64_t before = head;
    while (head < next_.load(std::memory_order_relaxed) &&
           load_acquire(&ring_->entries[head % MORI_SHMEM_PROXY_RING_ENTRIES].state) == 0) {
      ++head;
    }
    if (head != before) publish(offsetof(mori_shmem_proxy_words_t, head), head);
  }
}

static_assert(offsetof(mori_shmem_proxy_ring_t, head) == offsetof(mori_shmem_proxy_words_t, head) &&
                  offsetof(mori_shmem_proxy_ring_t, done) == offsetof(mori_shmem_proxy_words_t, done),
              "publish() sets a word at the same offset in the ring and in the words");

void DeviceProxy::publish(size_t word_offset, uint64_t value) {
  store_release(reinterpret_cast<unsigned long long*>(reinterpret_cast<uint8_t*>(ring_) + word_offset), value);
  try {
    context_.post_word(reinterpret_cast<void*>(device_words_ + word_offset), value);
  } catch (const std::exception& e) {
    // Kernels would wait on the GPU copy until they time out: say why once.
    if (!publish_failed_.exchange(true)) log::emit(log::Level::Error, "PE ", rank_, " device proxy: ", e.what());
  }
}

void DeviceProxy::execute(mori_shmem_proxy_entry_t& entry, uint64_t ticket) {
  const int pe = entry.pe;
  // NOTE [done once staged]: the kernel waits only for its source to be free.
  const auto staged = [this, ticket] { publish(offsetof(mori_shmem_proxy_words_t, done), ticket + 1); };
  try {
    switch (entry.op) {
      case MORI_SHMEM_PROXY_PUT:
        io_.put(conduit_, pe, entry.offset, reinterpret_cast<const void*>(entry.local), entry.bytes, staged);
        break;
      case MORI_SHMEM_PROXY_GET:
        io_.get(conduit_, pe, entry.offset, reinterpret_cast<void*>(entry.local), entry.bytes);
        break;
      case MORI_SHMEM_PROXY_PUT_SIGNAL:
        io_.put_signal(conduit_, pe, entry.offset, reinterpret_cast<const void*>(entry.local), entry.bytes,
                       entry.signal_offset, entry.value, entry.amo, staged);
        break;
      case MORI_SHMEM_PROXY_PUT_SIGNAL_INLINE:
        if (entry.bytes > MORI_SHMEM_PROXY_INLINE_BYTES) {
          throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "an inline put-with-signal of ", entry.bytes,
                      " bytes (an entry holds ", MORI_SHMEM_PROXY_INLINE_BYTES, ")");
        }
        conduit_.put_signal(pe, entry.offset, entry.payload, entry.bytes, entry.signal_offset, entry.value, entry.amo);
        break;
      case MORI_SHMEM_PROXY_SIGNAL: conduit_.signal(pe, entry.offset, entry.value, entry.amo); break;
      case MORI_SHMEM_PROXY_AMO:
        // A signal set or add (the device barrier's arrivals among them) needs no answer: sent as a
        // signal, it costs the proxy a send instead of a round trip, and is applied by the next
        // quiet, as a non-fetching atomic must be.
        if ((entry.amo == MORI_SHMEM_SIGNAL_SET || entry.amo == MORI_SHMEM_SIGNAL_ADD) &&
            entry.type == MORI_SHMEM_TYPE_UINT64) {
          conduit_.signal(pe, entry.offset, entry.value, entry.amo);
        } else {
          conduit_.atomic(pe, entry.offset, entry.amo, int(entry.type), entry.value, entry.compare);
        }
        break;
      case MORI_SHMEM_PROXY_AMO_FETCH:
        entry.answer = conduit_.atomic(pe, entry.offset, entry.amo, int(entry.type), entry.value, entry.compare);
        store_release(&entry.state, MORI_SHMEM_PROXY_ANSWERED | ticket);
        return;
      case MORI_SHMEM_PROXY_PUT_IMM: {
        const uint64_t value = entry.value;  // the low `bytes` bytes (little endian)
        conduit_.put(pe, entry.offset, &value, entry.bytes);
        break;
      }
      case MORI_SHMEM_PROXY_QUIET: conduit_.quiet(); break;
      default:
        log::emit(log::Level::Error, "PE ", rank_, ": device proxy got request op ", entry.op, " (ticket ", ticket,
                  "), which it does not know");
        record_device_error(MORI_SHMEM_DEVICE_ERR_INVALID_ARGUMENT);
    }
  } catch (const std::exception& e) {
    // The kernel must not wait forever: the request counts as done, and the error word tells the
    // host (shmem_check_device_error) what happened.
    log::emit(log::Level::Error, "PE ", rank_, ": device proxy request to PE ", pe, " failed: ", e.what());
    record_device_error(MORI_SHMEM_DEVICE_ERR_UNREACHABLE_PE);
    if (entry.op == MORI_SHMEM_PROXY_AMO_FETCH) {
      entry.answer = 0;
      store_release(&entry.state, MORI_SHMEM_PROXY_ANSWERED | ticket);
      return;
    }
  }
  store_release(&entry.state, 0);
}

bool DeviceProxy::batchable(unsigned op) { return op == MORI_SHMEM_PROXY_PUT || op == MORI_SHMEM_PROXY_QUIET; }

uint64_t DeviceProxy::execute_batch(uint64_t first) {
  // NOTE [coalesced puts]: every ready put or QUIET from `first` on, up to a ring's worth.
  std::vector<PutPiece> puts;
  bool quiet = false;
  uint64_t end = first;
  uint64_t first_quiet = 0;
  for (; end < first + MORI_SHMEM_PROXY_RING_ENTRIES; ++end) {
    const mori_shmem_proxy_entry_t& e = ring_->entries[end % MORI_SHMEM_PROXY_RING_ENTRIES];
    if (load_acquire(&e.state) != end + 1 || !batchable(e.op)) break;
    if (e.op == MORI_SHMEM_PROXY_QUIET) {
      if (!quiet) first_quiet = end;
      quiet = true;
    } else {
      puts.push_back({e.pe, e.offset, e.local, e.bytes});
    }
  }
  batched_requests_ += end - first;
  // NOTE [done once staged]: the puts before the batch's first QUIET are carried out once their
  // bytes are staged; `done` passes a QUIET only after the quiet.
  const uint64_t staged_done = quiet ? first_quiet : end;
  const std::vector<PutPiece> transfers = coalesce_puts(std::move(puts), kMaxTransferBytes);
  int pe = -1;
  try {
    const uint64_t t0 = monotonic_ns();
    for (size_t i = 0; i < transfers.size(); ++i) {
      const PutPiece& transfer = transfers[i];
      pe = transfer.pe;
      std::function<void()> staged;
      if (i + 1 == transfers.size() && staged_done > first) {
        staged = [this, staged_done] { publish(offsetof(mori_shmem_proxy_words_t, done), staged_done); };
      }
      io_.put(conduit_, transfer.pe, transfer.offset, reinterpret_cast<const void*>(transfer.local), transfer.bytes,
              staged);
      ++batch_transfers_;
    }
    pe = -1;
    const uint64_t t1 = monotonic_ns();
    times_.add(kBatchTransfers, t1 - t0);
    if (quiet) {
      conduit_.quiet();
      times_.add(kBatchQuiet, monotonic_ns() - t1);
    }
  } catch (const std::exception& e) {
    // As in execute: the requests count as done, the error word says what happened.
    log::emit(log::Level::Error, "PE ", rank_, ": device proxy ", pe >= 0 ? "put to PE " : "quiet",
              pe >= 0 ? std::to_string(pe) : std::string(), " failed: ", e.what());
    record_device_error(MORI_SHMEM_DEVICE_ERR_UNREACHABLE_PE);
  }
  for (uint64_t ticket = first; ticket < end; ++ticket) {
    store_release(&ring_->entries[ticket % MORI_SHMEM_PROXY_RING_ENTRIES].state, 0);
  }
  return end;
}

void DeviceProxy::record_device_error(uint32_t code) {
  try {
    uint8_t* word = sync_words_ + MORI_SHMEM_SYNC_ERROR_OFFSET;
    uint32_t current = 0;
    context_.copy(&current, word, sizeof(current));
    if (current == MORI_SHMEM_DEVICE_OK) context_.copy(word, &code, sizeof(code));
  } catch (const std::exception& e) {
    log::emit(log::Level::Error, "PE ", rank_, ": could not record a device error: ", e.what());
  }
}

void DeviceProxy::drain() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  uint64_t tail = 0;
  context_.copy(&tail, sync_words_ + MORI_SHMEM_SYNC_PROXY_TAIL_OFFSET, sizeof(tail));
  for (uint64_t idle = 0; next_.load(std::memory_order_acquire) < tail; ++idle) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw_error(MORI_SHMEM_ERR_TIMEOUT, "the device proxy of PE ", rank_, " carried out ",
                  next_.load(), " of the ", tail, " requests kernels posted within ", timeout_s_,
                  " s (a kernel may still be writing one, or a peer stopped answering)");
    }
    idle_back_off(idle);
  }
}

}  // namespace mori::shmem::remote
