// SPDX-License-Identifier: MIT
// NOTE [staging pipeline]: the remote transport moves GPU bytes through pinned host memory. With
// one staging buffer the copy out of the GPU, the socket and the copy into the peer's GPU ran one
// after another, and a PE's streams took turns at its one inbound buffer: the conduit moved about
// a third of what the socket does (issue 32). A transfer now goes through slots, each with a copy
// stream of its own, so the copy of one slot runs while another slot is on the wire, and each
// connection being served takes a set of slots of its own from a small pool.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bootstrap/socket.hpp"
#include "cuda/context.hpp"
#include "remote/conduit.hpp"
#include "remote/pinned_buffer.hpp"
#include "remote/time_account.hpp"

namespace mori::shmem::remote {

class StagingSlots {
 public:
  // Phases of a TimeAccount that the transfers below add their time to: waiting for staging copies,
  // and the socket or conduit.
  struct Phases {
    size_t copy;
    size_t wire;
  };

  StagingSlots(const cuda::DeviceContext& context, size_t slots, size_t slot_bytes);
  ~StagingSlots();
  StagingSlots(const StagingSlots&) = delete;
  StagingSlots& operator=(const StagingSlots&) = delete;

  size_t slot_bytes() const { return slot_bytes_; }

  // Hands [src, src + nbytes) (memory the driver can copy) to sink(host_bytes, begin, length) a slot
  // at a time, the next slots' copies running while sink has one. Returns once sink had them all.
  template <typename Sink, typename Account>
  void send_from(const uint8_t* src, size_t nbytes, Sink&& sink, Account& times, Phases phases);
  // NOTE [streamed staging]: the copies of [src, src + nbytes) out of the GPU are queued all at once,
  // in a few pieces on one stream (NOTE [stripe-first staging]), each followed by a stream write of
  // its flag, and
  // send(host_bytes, begin, length, staged) runs while they land (staged: Conduit's, which waits
  // for the flags), a window of all slots at a time. So a transfer is on the wire as soon as its
  // first piece is out of the GPU: send_from copied a slot (2 MiB) whole before sending any of it,
  // which was the whole transfer below 2 MiB (issue 32: 60-75 us of an inter-node EP batch's
  // 330-400). on_staged, when given, runs once every byte has left src, on whichever of send's
  // threads sees that first, else when send returns.
  // stripe_of(bytes): the bytes each of send's connections carries of a window of `bytes` (NOTE
  // [stripe-first staging]).
  template <typename StripeOf, typename Send, typename Account>
  void send_streamed(const uint8_t* src, size_t nbytes, StripeOf&& stripe_of, Send&& send, Account& times,
                     Phases phases, const std::function<void()>& on_staged = {});
  // Fills [dst, dst + nbytes) from source(host_bytes, begin, length) a slot at a time, each slot's
  // copy running while source fills the next. Returns once every byte is in place.
  template <typename Source, typename Account>
  void receive_into(uint8_t* dst, size_t nbytes, Source&& source, Account& times, Phases phases);
  // Fills [dst, dst + nbytes), at most a slot, from source(host_bytes, 0, nbytes), then stores
  // `value` at `word` behind the copy on the same stream: one wait for both (a put-with-signal's
  // payload and signal, which would otherwise wait for the copy and then for the word).
  template <typename Source, typename Account>
  void receive_then_set(uint8_t* dst, size_t nbytes, Source&& source, void* word, uint64_t value, Account& times,
                        Phases phases);

 private:
  uint8_t* slot(size_t piece) const { return buffer_.host() + (piece % streams_.size()) * slot_bytes_; }
  cuda::CUstream stream(size_t piece) const { return streams_[piece % streams_.size()]; }
  size_t length(size_t piece, size_t nbytes) const { return std::min(slot_bytes_, nbytes - piece * slot_bytes_); }
  // After a failed transfer: the copies still queued finish before anyone refills their slots.
  void settle() noexcept;
  // NOTE [streamed staging]: queues the copies of [src, src + bytes) (at most all slots) into the
  // buffer, each piece's flag set to `serial` behind it, the start of each `stripe` first (NOTE
  // [stripe-first staging]); returns the piece size.
  size_t stage(const uint8_t* src, size_t bytes, uint64_t serial, size_t stripe);
  bool piece_landed(size_t piece, uint64_t serial) const;
  bool all_landed(size_t pieces, uint64_t serial) const;
  void wait_piece(size_t piece, uint64_t serial) const;

  static constexpr size_t kMaxPieces = 8, kMinPieceBytes = 64 << 10;
  const cuda::DeviceContext& context_;
  size_t slot_bytes_;
  PinnedBuffer buffer_;
  PinnedBuffer flags_;  // a word per piece: the serial of the window whose copy last landed there
  uint64_t serial_ = 0;
  std::vector<cuda::CUstream> streams_;  // one per slot
};

// Slot sets for the connections this PE serves: one each while it is in a transfer; a connection
// finding all `sets` in use waits for one (until its deadline).
class StagingPool {
 public:
  StagingPool(const cuda::DeviceContext& context, size_t slots, size_t slot_bytes, size_t sets);

  class Lease {
   public:
    Lease(StagingPool& pool, std::unique_ptr<StagingSlots> slots) : pool_(pool), slots_(std::move(slots)) {}
    ~Lease() { pool_.give_back(std::move(slots_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    StagingSlots* operator->() const { return slots_.get(); }

   private:
    StagingPool& pool_;
    std::unique_ptr<StagingSlots> slots_;
  };

  Lease take(const Deadline& deadline);

 private:
  void give_back(std::unique_ptr<StagingSlots> slots);

  size_t sets_;
  std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<StagingSlots>> idle_;
};

template <typename Sink, typename Account>
void StagingSlots::send_from(const uint8_t* src, size_t nbytes, Sink&& sink, Account& times, Phases phases) {
  const size_t pieces = (nbytes + slot_bytes_ - 1) / slot_bytes_;
  size_t staged = 0;
  try {
    for (size_t piece = 0; piece < pieces; ++piece) {
      // Every slot but the one just sent is in use: pieces up to piece + slots - 1 may be copying.
      for (const size_t end = std::min(pieces, piece + streams_.size()); staged < end; ++staged) {
        context_.copy_async(slot(staged), src + staged * slot_bytes_, length(staged, nbytes), stream(staged));
      }
      const uint64_t t0 = monotonic_ns();
      context_.finish_stream(stream(piece), "staging a transfer out of the GPU heap");
      const uint64_t t1 = monotonic_ns();
      sink(slot(piece), piece * slot_bytes_, length(piece, nbytes));
      times.add(phases.copy, t1 - t0);
      times.add(phases.wire, monotonic_ns() - t1);
    }
  } catch (...) {
    settle();
    throw;
  }
}

template <typename StripeOf, typename Send, typename Account>
void StagingSlots::send_streamed(const uint8_t* src, size_t nbytes, StripeOf&& stripe_of, Send&& send, Account& times,
                                 Phases phases, const std::function<void()>& on_staged) {
  const size_t window = streams_.size() * slot_bytes_;
  const std::thread::id caller = std::this_thread::get_id();
  try {
    for (size_t begin = 0; begin < nbytes; begin += window) {
      const size_t bytes = std::min(window, nbytes - begin);
      const uint64_t t0 = monotonic_ns();
      const uint64_t serial = ++serial_;
      const size_t piece = stage(src + begin, bytes, serial, stripe_of(bytes));
      const size_t pieces = (bytes + piece - 1) / piece;
      std::atomic<bool> announced{!on_staged || begin + bytes < nbytes};
      uint64_t caller_waits = 0;  // the copy phase: the caller's waits for pieces
      const Staged staged = [&](size_t from, size_t length) -> size_t {
        const uint64_t w0 = monotonic_ns();
        wait_piece(from / piece, serial);
        if (std::this_thread::get_id() == caller) caller_waits += monotonic_ns() - w0;
        size_t end = (from / piece + 1) * piece;
        while (end < from + length && piece_landed(end / piece, serial)) end += piece;
        if (!announced.load(std::memory_order_relaxed) && all_landed(pieces, serial) && !announced.exchange(true)) {
          on_staged();
        }
        return std::min(end, from + length) - from;
      };
      send(buffer_.host(), begin, bytes, staged);
      if (!announced.exchange(true)) on_staged();
      times.add(phases.copy, caller_waits);
      times.add(phases.wire, monotonic_ns() - t0 - caller_waits);
    }
  } catch (...) {
    settle();
    throw;
  }
}

template <typename Source, typename Account>
void StagingSlots::receive_into(uint8_t* dst, size_t nbytes, Source&& source, Account& times, Phases phases) {
  const size_t pieces = (nbytes + slot_bytes_ - 1) / slot_bytes_;
  try {
    for (size_t piece = 0; piece < pieces; ++piece) {
      const uint64_t t0 = monotonic_ns();
      // The slot's last copy (piece - slots) has left it before source refills it.
      if (piece >= streams_.size()) context_.finish_stream(stream(piece), "staging a transfer into the GPU heap");
      const uint64_t t1 = monotonic_ns();
      source(slot(piece), piece * slot_bytes_, length(piece, nbytes));
      const uint64_t t2 = monotonic_ns();
      context_.copy_async(dst + piece * slot_bytes_, slot(piece), length(piece, nbytes), stream(piece));
      times.add(phases.copy, t1 - t0);
      times.add(phases.wire, t2 - t1);
    }
    const uint64_t t0 = monotonic_ns();
    for (size_t piece = 0; piece < std::min(pieces, streams_.size()); ++piece) {
      context_.finish_stream(stream(piece), "staging a transfer into the GPU heap");
    }
    if (pieces > 0) times.add(phases.copy, monotonic_ns() - t0);
  } catch (...) {
    settle();
    throw;
  }
}

template <typename Source, typename Account>
void StagingSlots::receive_then_set(uint8_t* dst, size_t nbytes, Source&& source, void* word, uint64_t value,
                                    Account& times, Phases phases) {
  try {
    const uint64_t t0 = monotonic_ns();
    source(slot(0), 0, nbytes);
    const uint64_t t1 = monotonic_ns();
    if (nbytes == sizeof(uint64_t) && reinterpret_cast<uintptr_t>(dst) % sizeof(uint64_t) == 0) {
      // A word (a flag, a count) is a stream write, as the signal is: cheaper than a copy's launch.
      uint64_t bits;
      std::memcpy(&bits, slot(0), sizeof bits);
      context_.write_word_async(dst, bits, stream(0));
    } else if (nbytes > 0) {  // a bare signal has none
      context_.copy_async(dst, slot(0), nbytes, stream(0));
    }
    context_.write_word_async(word, value, stream(0));
    context_.finish_stream(stream(0), "setting a put-with-signal's payload and signal in the GPU heap");
    times.add(phases.wire, t1 - t0);
    times.add(phases.copy, monotonic_ns() - t1);
  } catch (...) {
    settle();
    throw;
  }
}

}  // namespace mori::shmem::remote
