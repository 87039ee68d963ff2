// SPDX-License-Identifier: MIT
#include "remote/device_proxy.hpp"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.hpp"
#include "core/log.hpp"
#include "mori_shmem/device_state.h"

namespace mori::shmem::remote {

namespace {

uint64_t load_acquire(const unsigned long long* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
void store_release(unsigned long long* word, uint64_t value) { __atomic_store_n(word, value, __ATOMIC_RELEASE); }

// Spin while requests keep coming, then yield, then nap: an idle proxy costs little CPU, a busy
// one answers within a microsecond or two.
void back_off(uint64_t idle_rounds) {
  if (idle_rounds < 4000) return;
  if (idle_rounds < 20000) {
    sched_yield();
    return;
  }
  timespec nap{0, 20000};
  nanosleep(&nap, nullptr);
}

// Entries taken at once: bounds the time a kernel's first request waits for the batch's last.
constexpr size_t kMaxBatch = 256;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

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
      completion_(context) {
  std::memset(ring_, 0, sizeof(*ring_));
  publish(0, 0);
  completion_.synchronize();
  batch_.reserve(kMaxBatch);
  pending_.reserve(kMaxBatch);
  thread_ = std::thread([this] { run(); });
}

DeviceProxy::~DeviceProxy() {
  stopping_.store(true);
  if (thread_.joinable()) thread_.join();
  if (tally_.requests > 0) {
    log::emit(log::Level::Debug, "PE ", rank_, ": device proxy carried out ", tally_.requests, " requests in ",
              tally_.batches, " batches: ", tally_.transfers, " put transfers (", tally_.bytes, " bytes) in ",
              tally_.put_s, " s, ", tally_.quiets, " quiets in ", tally_.quiet_s, " s, other requests ",
              tally_.other_s, " s");
  }
}

void DeviceProxy::run() {
  try {
    serve();
  } catch (const std::exception& e) {
    // Kernels waiting on this proxy end in the device timeout, which the host reports.
    log::emit(log::Level::Error, "PE ", rank_, ": device proxy stopped: ", e.what());
  }
}

void DeviceProxy::serve() {
  context_.bind();
  uint64_t head = 0;
  uint64_t idle = 0;
  while (!stopping_.load(std::memory_order_relaxed)) {
    const uint64_t first = next_.load(std::memory_order_relaxed);
    take_batch(first);
    if (!batch_.empty()) {
      carry_out_batch();
      next_.store(first + batch_.size(), std::memory_order_release);
      idle = 0;
    } else {
      back_off(++idle);
    }
    // Slots free again once carried out (or, for an answer, once the kernel has read it).
    const uint64_t before = head;
    while (head < next_.load(std::memory_order_relaxed) &&
           load_acquire(&ring_->entries[head % MORI_SHMEM_PROXY_RING_ENTRIES].state) == 0) {
      ++head;
    }
    if (!batch_.empty() || head != before) {
      try {
        publish(next_.load(std::memory_order_relaxed), head);
      } catch (const std::exception& e) {
        // Kernels reading the ring's host words still see progress; the GPU words are stuck, so
        // their waits end in the device timeout, which the host reports.
        log::emit(log::Level::Error, "PE ", rank_, ": device proxy could not publish its progress: ", e.what());
        record_device_error(MORI_SHMEM_DEVICE_ERR_UNREACHABLE_PE);
      }
    }
  }
}

void DeviceProxy::publish(uint64_t done, uint64_t head) {
  store_release(&ring_->done, done);
  store_release(&ring_->head, head);
  completion_.write_word_async(sync_words_ + MORI_SHMEM_SYNC_PROXY_DONE_OFFSET, done);
  completion_.write_word_async(sync_words_ + MORI_SHMEM_SYNC_PROXY_HEAD_OFFSET, head);
}

void DeviceProxy::take_batch(uint64_t first) {
  batch_.clear();
  for (uint64_t ticket = first; batch_.size() < kMaxBatch; ++ticket) {
    mori_shmem_proxy_entry_t& entry = ring_->entries[ticket % MORI_SHMEM_PROXY_RING_ENTRIES];
    if (load_acquire(&entry.state) != ticket + 1) break;
    batch_.push_back({ticket, &entry});
  }
}

void DeviceProxy::carry_out_batch() {
  ++tally_.batches;
  tally_.requests += batch_.size();
  bool quiet_owed = false;
  // Puts and QUIETs gather; anything else first sends the gathered puts and owed QUIET.
  const auto settle = [&] {
    flush_puts();
    if (!quiet_owed) return;
    quiet_owed = false;
    const auto start = std::chrono::steady_clock::now();
    try {
      conduit_.quiet();
    } catch (const std::exception& e) {
      log::emit(log::Level::Error, "PE ", rank_, ": device proxy quiet failed: ", e.what());
      record_device_error(MORI_SHMEM_DEVICE_ERR_UNREACHABLE_PE);
    }
    ++tally_.quiets;
    tally_.quiet_s += seconds_since(start);
  };
  for (const Taken& taken : batch_) {
    mori_shmem_proxy_entry_t& entry = *taken.entry;
    switch (entry.op) {
      case MORI_SHMEM_PROXY_PUT:
        pending_.push_back({entry.pe, entry.offset, reinterpret_cast<const uint8_t*>(entry.local), entry.bytes, false});
        break;
      case MORI_SHMEM_PROXY_PUT_INLINE:
        pending_.push_back({entry.pe, entry.offset, reinterpret_cast<const uint8_t*>(entry.inline_data),
                            std::min<uint64_t>(entry.bytes, MORI_SHMEM_PROXY_INLINE_BYTES), true});
        break;
      case MORI_SHMEM_PROXY_QUIET: quiet_owed = true; break;
      default: {
        settle();
        const auto start = std::chrono::steady_clock::now();
        execute(entry, taken.ticket);
        tally_.other_s += seconds_since(start);
      }
    }
  }
  settle();
  for (const Taken& taken : batch_) {
    if (taken.entry->op != MORI_SHMEM_PROXY_AMO_FETCH) store_release(&taken.entry->state, 0);
  }
}

void DeviceProxy::flush_puts() {
  if (pending_.empty()) return;
  // Puts between two orderings may land in any order, so they are sorted by destination and the
  // ones that continue each other (destination and GPU source) go as one transfer; unless two
  // overlap, when the later one must land last and the order stays.
  const auto by_destination = [](const PendingPut& a, const PendingPut& b) {
    return a.pe != b.pe ? a.pe < b.pe : a.offset < b.offset;
  };
  std::vector<PendingPut> sorted = pending_;
  std::stable_sort(sorted.begin(), sorted.end(), by_destination);
  bool overlap = false;
  for (size_t i = 1; i < sorted.size() && !overlap; ++i) {
    overlap = sorted[i].pe == sorted[i - 1].pe && sorted[i].offset < sorted[i - 1].offset + sorted[i - 1].bytes;
  }
  const std::vector<PendingPut>& order = overlap ? pending_ : sorted;
  PendingPut run = order.front();
  for (size_t i = 1; i < order.size(); ++i) {
    const PendingPut& next = order[i];
    const bool continues = !overlap && !run.inline_bytes && !next.inline_bytes && next.pe == run.pe &&
                           next.offset == run.offset + run.bytes && next.source == run.source + run.bytes;
    if (continues) {
      run.bytes += next.bytes;
      continue;
    }
    run_put(run);
    run = next;
  }
  run_put(run);
  pending_.clear();
}

void DeviceProxy::run_put(const PendingPut& put) {
  const auto start = std::chrono::steady_clock::now();
  try {
    if (put.inline_bytes) {
      conduit_.put(put.pe, put.offset, put.source, put.bytes);
    } else {
      io_.put(conduit_, put.pe, put.offset, put.source, put.bytes);
    }
  } catch (const std::exception& e) {
    // The kernel must not wait forever: the request counts as done, and the error word tells the
    // host (shmem_check_device_error) what happened.
    log::emit(log::Level::Error, "PE ", rank_, ": device proxy put to PE ", put.pe, " failed: ", e.what());
    record_device_error(MORI_SHMEM_DEVICE_ERR_UNREACHABLE_PE);
  }
  ++tally_.transfers;
  tally_.bytes += put.bytes;
  tally_.put_s += seconds_since(start);
}

void DeviceProxy::execute(mori_shmem_proxy_entry_t& entry, uint64_t ticket) {
  const int pe = entry.pe;
  try {
    switch (entry.op) {
      case MORI_SHMEM_PROXY_GET:
        io_.get(conduit_, pe, entry.offset, reinterpret_cast<void*>(entry.local), entry.bytes);
        break;
      case MORI_SHMEM_PROXY_PUT_SIGNAL:
        io_.put_signal(conduit_, pe, entry.offset, reinterpret_cast<const void*>(entry.local), entry.bytes,
                       entry.signal_offset, entry.value, entry.amo);
        break;
      case MORI_SHMEM_PROXY_PUT_SIGNAL_INLINE:
        conduit_.put_signal(pe, entry.offset, entry.inline_data, std::min<uint64_t>(entry.bytes, MORI_SHMEM_PROXY_INLINE_BYTES),
                            entry.signal_offset, entry.value, entry.amo);
        break;
      case MORI_SHMEM_PROXY_SIGNAL: conduit_.signal(pe, entry.offset, entry.value, entry.amo); break;
      case MORI_SHMEM_PROXY_AMO: conduit_.atomic(pe, entry.offset, entry.amo, int(entry.type), entry.value, entry.compare); break;
      case MORI_SHMEM_PROXY_AMO_FETCH:
        entry.answer = conduit_.atomic(pe, entry.offset, entry.amo, int(entry.type), entry.value, entry.compare);
        store_release(&entry.state, MORI_SHMEM_PROXY_ANSWERED | ticket);
        return;
      case MORI_SHMEM_PROXY_PUT_IMM: {
        const uint64_t value = entry.value;  // the low `bytes` bytes (little endian)
        conduit_.put(pe, entry.offset, &value, entry.bytes);
        break;
      }
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
    }
  }
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
    back_off(idle);
  }
}

}  // namespace mori::shmem::remote
