// SPDX-License-Identifier: MIT
#include "remote/staging_slots.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "core/back_off.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "remote/stripe_first.hpp"

namespace mori::shmem::remote {

StagingSlots::StagingSlots(const cuda::DeviceContext& context, size_t slots, size_t slot_bytes)
    : context_(context),
      slot_bytes_(slot_bytes),
      buffer_(context, slots * slot_bytes),
      flags_(context, kMaxPieces * sizeof(uint64_t)) {
  std::memset(flags_.host(), 0, flags_.size());
  // send_from queues a copy into every slot but the one being sent: one slot would copy nothing ahead.
  if (slots < 2) throw_error(MORI_SHMEM_ERR_INTERNAL, "staging needs at least 2 slots, not ", slots);
  streams_.reserve(slots);
  try {
    for (size_t i = 0; i < slots; ++i) streams_.push_back(context_.create_stream());
  } catch (...) {
    for (cuda::CUstream stream : streams_) context_.destroy_stream(stream);
    throw;
  }
}

StagingSlots::~StagingSlots() {
  settle();  // no copy may still read or write the pinned memory that goes with this object
  for (cuda::CUstream stream : streams_) context_.destroy_stream(stream);
}

void StagingSlots::settle() noexcept {
  for (cuda::CUstream stream : streams_) {
    try {
      context_.finish_stream(stream, "finishing the staging copies of a failed transfer");
    } catch (const std::exception& e) {
      log::emit(log::Level::Warning, "remote transport: ", e.what());
    }
  }
}

size_t StagingSlots::stage(const uint8_t* src, size_t bytes, uint64_t serial, size_t stripe) {
  // Pieces of an eighth, 64 KiB at least: each costs the proxy thread a copy's launch and a stream
  // write (a few us each), and the smaller the first ones, the sooner the wire has bytes.
  const size_t share = ((bytes + kMaxPieces - 1) / kMaxPieces + kMinPieceBytes - 1) / kMinPieceBytes * kMinPieceBytes;
  const size_t piece = std::min(buffer_.size(), std::max(share, kMinPieceBytes));
  std::array<size_t, kMaxPieces> order{};
  std::array<bool, kMaxPieces> taken{};
  const size_t pieces = stripe_first_order(bytes, piece, stripe, order.data(), taken.data());
  // One stream, so the pieces land in the order queued (NOTE [stripe-first staging]); queued on a
  // stream each, they shared the copy engines and landed together.
  uint64_t* flags = reinterpret_cast<uint64_t*>(flags_.device());
  for (size_t k = 0; k < pieces; ++k) {
    const size_t begin = order[k] * piece;
    context_.copy_async(buffer_.host() + begin, src + begin, std::min(piece, bytes - begin), stream(0));
    context_.write_word_async(flags + order[k], serial, stream(0));
  }
  return piece;
}

bool StagingSlots::piece_landed(size_t piece, uint64_t serial) const {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(flags_.host()) + piece, __ATOMIC_ACQUIRE) == serial;
}

bool StagingSlots::all_landed(size_t pieces, uint64_t serial) const {
  for (size_t piece = 0; piece < pieces; ++piece) {
    if (!piece_landed(piece, serial)) return false;
  }
  return true;
}

void StagingSlots::wait_piece(size_t piece, uint64_t serial) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(context_.timeout_s());
  for (uint64_t round = 0; !piece_landed(piece, serial); ++round) {
    if (round % 1024 == 1023) {
      // A failed copy never sets its flag: its stream says so.
      context_.stream_done(stream(0), "staging a transfer out of the GPU heap");
      if (std::chrono::steady_clock::now() > deadline) {
        throw_error(MORI_SHMEM_ERR_TIMEOUT, "staging a transfer out of the GPU heap: a copy did not finish within ",
                    context_.timeout_s(), " s (MORI_SHMEM_WAIT_TIMEOUT)");
      }
    }
    back_off(round, 2000, 20000);
  }
}

StagingPool::StagingPool(const cuda::DeviceContext& context, size_t slots, size_t slot_bytes, size_t sets)
    : sets_(sets) {
  // All made here: pinned allocations and stream creation are calls a CUDA graph capture in the
  // application's threads (global mode) would refuse, and the refusal would end that capture.
  idle_.reserve(sets);
  for (size_t i = 0; i < sets; ++i) idle_.push_back(std::make_unique<StagingSlots>(context, slots, slot_bytes));
}

StagingPool::Lease StagingPool::take(const Deadline& deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!returned_.wait_until(lock, deadline.at, [this] { return !idle_.empty(); })) {
    throw_error(MORI_SHMEM_ERR_TIMEOUT, "the remote transport's ", sets_,
                " inbound staging buffers stayed busy until the request's deadline");
  }
  std::unique_ptr<StagingSlots> slots = std::move(idle_.back());
  idle_.pop_back();
  return Lease(*this, std::move(slots));
}

void StagingPool::give_back(std::unique_ptr<StagingSlots> slots) {
  if (!slots) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(std::move(slots));
  }
  returned_.notify_one();
}

}  // namespace mori::shmem::remote
