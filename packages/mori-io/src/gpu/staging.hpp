// SPDX-License-Identifier: MIT
// TCP transfers of GPU memory: the bytes of a frame go between the socket and the GPU through a
// pinned host buffer, cut into up to Channel::kEvents pieces so that the copy of one piece
// (cuMemcpyDtoHAsync / cuMemcpyHtoDAsync on a stream of mori-io's own) overlaps with the socket
// I/O of the others. The wire format is the same as for host memory: a peer cannot tell.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/device.hpp"
#include "net/reader.hpp"
#include "net/socket.hpp"

namespace mori::io::gpu {

class Stager {
 public:
  // segments: device addresses of `device`, in payload order, summing to payload bytes.
  Stager(int device, const std::vector<iovec>& segments, uint64_t payload);
  ~Stager();  // waits for copies still in flight before the buffers go back to their pools
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  // GPU -> pinned: enqueues every piece's copies. Returns an empty string, or the CUDA error of
  // a copy that could not be enqueued (then nothing may be sent).
  std::string start_download();
  // Sends the pinned bytes piece by piece as each piece's copy completes. Throws Error on a
  // socket error, or on a CUDA error while waiting (the stream would otherwise go out of step).
  void send(const net::Socket& socket, net::Deadline deadline, const std::atomic<bool>* stop);
  // Receives the payload piece by piece and uploads each piece as it lands, then waits for the
  // uploads. Throws Error on a socket error; returns the first CUDA error as text (the socket is
  // still drained to the frame's end, so the connection stays usable), or an empty string.
  std::string receive(net::StreamReader& reader, net::Deadline deadline, const std::atomic<bool>* stop);

 private:
  template <typename Fn>
  void for_each_part(uint64_t begin, uint64_t end, Fn&& fn) const;

  int device_;
  const std::vector<iovec>& segments_;
  uint64_t payload_;
  uint64_t piece_ = 0;
  int pieces_ = 0;
  ChannelLease channel_;
  PinnedLease pinned_;
};

}  // namespace mori::io::gpu
