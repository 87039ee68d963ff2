// SPDX-License-Identifier: MIT
// Two PEs' tcp conduits in one process (a thread each, host heaps, a bootstrap in memory): PE 0
// sends the bytes of SOURCE to PE 1 with put_staged or put_signal_staged (NOTE [streamed staging])
// while a thread lands them in its send buffer a piece at a time, as the GPU's staging copies
// would; bytes not landed yet hold 0xEE, so a conduit that sent one early delivers garbage.
// Above the size that travels with its header, the lander holds the rest back until PE 1 has
// the first piece: a conduit that waited for the whole payload before sending fails (exit 3).
// Writes PE 1's heap after the quiet to OUT and, for put_signal, the heap as PE 1 saw it when the
// signal arrived to OUT.at_signal (test_conduit_staged.py).
//
//   tcp_conduit_staged SOURCE OUT put|put_signal STREAMS PIECE_BYTES
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "remote/heap_access.hpp"
#include "remote/tcp_conduit.hpp"

using namespace mori::shmem;

namespace {

constexpr uint64_t kDataOffset = 64;  // the signal word is at heap offset 0
constexpr uint64_t kSignal = 42;
constexpr double kTimeoutS = 30;
constexpr size_t kWithHeaderBytes = 16 << 10;  // tcp_conduit.cpp's kCoalesceBytes

class MemoryBootstrap final : public Bootstrap {
 public:
  struct Room {
    std::mutex mutex;
    std::condition_variable moved;
    int arrived = 0;
    uint64_t generation = 0;
    std::vector<uint8_t> blocks;
  };

  MemoryBootstrap(Room& room, int rank) : room_(room), rank_(rank) { secret_.fill(7); }
  int rank() const override { return rank_; }
  int nranks() const override { return 2; }
  const Secret& secret() const override { return secret_; }

  void barrier(const char*) override {
    std::unique_lock<std::mutex> lock(room_.mutex);
    const uint64_t generation = room_.generation;
    if (++room_.arrived == nranks()) {
      room_.arrived = 0;
      ++room_.generation;
      room_.moved.notify_all();
    } else {
      room_.moved.wait(lock, [&] { return room_.generation != generation; });
    }
  }

  void allgather(const void* send, void* recv, size_t bytes_per_rank, const char* what) override {
    {
      std::lock_guard<std::mutex> lock(room_.mutex);
      room_.blocks.resize(nranks() * bytes_per_rank);
      std::memcpy(room_.blocks.data() + rank_ * bytes_per_rank, send, bytes_per_rank);
    }
    barrier(what);
    {
      std::lock_guard<std::mutex> lock(room_.mutex);
      std::memcpy(recv, room_.blocks.data(), nranks() * bytes_per_rank);
    }
    barrier(what);
  }

  void broadcast(void* buf, size_t bytes, int root, const char* what) override {
    std::vector<uint8_t> all(nranks() * bytes);
    allgather(buf, all.data(), bytes, what);
    std::memcpy(buf, all.data() + root * bytes, bytes);
  }

 private:
  Room& room_;
  int rank_;
  Secret secret_{};
};

// The source of PE 0's put as a staging copy fills it: `landed` bytes from the front hold their
// data, the rest 0xEE until the lander reaches them.
struct LandingSource {
  std::vector<uint8_t> buffer;
  std::atomic<size_t> landed{0};

  size_t staged(size_t begin, size_t length) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kTimeoutS);
    size_t now = landed.load(std::memory_order_acquire);
    while (now <= begin) {
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("the lander stalled");
      std::this_thread::yield();
      now = landed.load(std::memory_order_acquire);
    }
    return std::min(now, begin + length) - begin;
  }
};

std::vector<uint8_t> read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const uint8_t* bytes, size_t n) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes), std::streamsize(n));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s SOURCE OUT put|put_signal STREAMS PIECE_BYTES\n", argv[0]);
    return 2;
  }
  const std::vector<uint8_t> source = read_file(argv[1]);
  const std::string out = argv[2], mode = argv[3];
  const bool signalled = mode == "put_signal";
  const size_t n = source.size(), piece = std::stoull(argv[5]);
  remote::ConduitConfig config;
  config.choice = "tcp";
  config.timeout_s = kTimeoutS;
  config.streams = std::stoi(argv[4]);

  std::vector<uint8_t> heaps[2] = {std::vector<uint8_t>(kDataOffset + n), std::vector<uint8_t>(kDataOffset + n)};
  remote::HostHeapAccess access[2] = {{heaps[0].data(), heaps[0].size()}, {heaps[1].data(), heaps[1].size()}};
  MemoryBootstrap::Room room;
  std::unique_ptr<remote::TcpConduit> conduits[2];
  std::vector<uint8_t> at_signal;
  LandingSource src;
  src.buffer.assign(n, 0xEE);
  std::atomic<int> status{0};

  // Whether PE 1's heap holds the first `bytes` of the source within a few seconds. (It reads
  // what the conduit's serving thread is writing: a test's look, not synchronisation.)
  const auto first_piece_arrived = [&](size_t bytes) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    const volatile uint8_t* heap = heaps[1].data() + kDataOffset;
    for (;;) {
      size_t same = 0;
      while (same < bytes && heap[same] == source[same]) ++same;
      if (same == bytes) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  };
  const auto pe_main = [&](int rank) {
    try {
      MemoryBootstrap bootstrap(room, rank);
      const std::vector<uint8_t> remote_pes = {uint8_t(rank != 0), uint8_t(rank != 1)};
      conduits[rank] = std::make_unique<remote::TcpConduit>(bootstrap, remote_pes, access[rank], config);
      if (rank == 1) {
        if (signalled) {
          const auto* word = reinterpret_cast<const uint64_t*>(heaps[1].data());
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kTimeoutS);
          while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != kSignal) {
            if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no signal arrived");
            std::this_thread::yield();
          }
          at_signal.assign(heaps[1].begin() + kDataOffset, heaps[1].end());
        }
        bootstrap.barrier("sent");
        return;
      }
      std::thread lander([&] {
        for (size_t begin = 0; begin < n; begin += piece) {
          const size_t end = std::min(n, begin + piece);
          std::this_thread::sleep_for(std::chrono::microseconds(300));
          std::memcpy(src.buffer.data() + begin, source.data() + begin, end - begin);
          src.landed.store(end, std::memory_order_release);
          if (begin == 0 && end < n && n > kWithHeaderBytes && !first_piece_arrived(end)) {
            std::fprintf(stderr, "PE 1 had no byte of the first piece before the rest had landed\n");
            status = 3;
          }
        }
      });
      const remote::Staged staged = [&](size_t begin, size_t length) { return src.staged(begin, length); };
      try {
        if (signalled) {
          conduits[0]->put_signal_staged(1, kDataOffset, src.buffer.data(), n, 0, kSignal, MORI_SHMEM_SIGNAL_SET,
                                         staged);
        } else {
          conduits[0]->put_staged(1, kDataOffset, src.buffer.data(), n, staged);
        }
        conduits[0]->quiet();
      } catch (...) {
        lander.join();
        throw;
      }
      lander.join();
      bootstrap.barrier("sent");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "PE %d: %s\n", rank, e.what());
      status = 1;
    }
  };
  std::thread pe1(pe_main, 1);
  pe_main(0);
  pe1.join();
  conduits[0].reset();
  conduits[1].reset();
  if (status != 0) return status;
  write_file(out, heaps[1].data() + kDataOffset, n);
  if (signalled) write_file(out + ".at_signal", at_signal.data(), at_signal.size());
  return 0;
}
