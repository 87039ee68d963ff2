// SPDX-License-Identifier: MIT
#include "gpu/staging.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace mori::io::gpu {

namespace {

// Below this a piece costs more in copy launches and waits than the overlap gains.
constexpr uint64_t kMinPiece = 256 * 1024;

}  // namespace

Stager::Stager(int device, const std::vector<iovec>& segments, uint64_t payload)
    : device_(device), segments_(segments), payload_(payload), channel_(device), pinned_(device, payload) {
  const uint64_t wanted = std::max<uint64_t>(1, (payload + kMinPiece - 1) / kMinPiece);
  pieces_ = static_cast<int>(std::min<uint64_t>(Channel::kEvents, wanted));
  piece_ = std::max<uint64_t>(1, (payload + pieces_ - 1) / pieces_);
}

Stager::~Stager() { cuda::driver().cuStreamSynchronize(channel_->stream); }

// Calls fn(device address, offset in the pinned buffer, length) for every part of the segments
// that falls in payload bytes [begin, end).
template <typename Fn>
void Stager::for_each_part(uint64_t begin, uint64_t end, Fn&& fn) const {
  uint64_t at = 0;
  for (const iovec& s : segments_) {
    const uint64_t s_end = at + s.iov_len;
    const uint64_t lo = std::max(begin, at);
    const uint64_t hi = std::min(end, s_end);
    if (lo < hi) fn(static_cast<char*>(s.iov_base) + (lo - at), lo, hi - lo);
    if (s_end >= end) return;
    at = s_end;
  }
}

std::string Stager::start_download() {
  const cuda::Driver& d = cuda::driver();
  for (int p = 0; p < pieces_; ++p) {
    const uint64_t begin = std::min(payload_, uint64_t(p) * piece_);
    const uint64_t end = std::min(payload_, begin + piece_);
    cuda::CUresult r = cuda::kSuccess;
    for_each_part(begin, end, [&](char* gpu, uint64_t off, uint64_t len) {
      if (r == cuda::kSuccess) {
        r = d.cuMemcpyDtoHAsync(pinned_.data() + off, reinterpret_cast<cuda::CUdeviceptr>(gpu), len,
                                channel_->stream);
      }
    });
    if (r != cuda::kSuccess) return cuda::describe(r, "cuMemcpyDtoHAsync") + " staging GPU " + std::to_string(device_);
    r = d.cuEventRecord(channel_->events[p], channel_->stream);
    if (r != cuda::kSuccess) return cuda::describe(r, "cuEventRecord") + " staging GPU " + std::to_string(device_);
  }
  return std::string();
}

void Stager::send(const net::Socket& socket, net::Deadline deadline, const std::atomic<bool>* stop) {
  const cuda::Driver& d = cuda::driver();
  for (int p = 0; p < pieces_; ++p) {
    const uint64_t begin = std::min(payload_, uint64_t(p) * piece_);
    const uint64_t end = std::min(payload_, begin + piece_);
    cuda::check(d.cuEventSynchronize(channel_->events[p]), "cuEventSynchronize",
                "copying GPU " + std::to_string(device_) + " memory to the staging buffer");
    net::send_all(socket, pinned_.data() + begin, end - begin, deadline, stop);
  }
}

std::string Stager::receive(net::StreamReader& reader, net::Deadline deadline, const std::atomic<bool>* stop) {
  const cuda::Driver& d = cuda::driver();
  std::string error;
  for (int p = 0; p < pieces_; ++p) {
    const uint64_t begin = std::min(payload_, uint64_t(p) * piece_);
    const uint64_t end = std::min(payload_, begin + piece_);
    reader.read(pinned_.data() + begin, end - begin, deadline, stop);
    if (!error.empty()) continue;  // keep the stream in step; the frame fails as a whole
    for_each_part(begin, end, [&](char* gpu, uint64_t off, uint64_t len) {
      if (!error.empty()) return;
      cuda::CUresult r = d.cuMemcpyHtoDAsync(reinterpret_cast<cuda::CUdeviceptr>(gpu), pinned_.data() + off, len,
                                             channel_->stream);
      if (r != cuda::kSuccess) error = cuda::describe(r, "cuMemcpyHtoDAsync");
    });
  }
  // The pinned buffer goes back to the pool, and the status may say SUCCESS, only once the GPU
  // holds the bytes.
  cuda::CUresult r = d.cuStreamSynchronize(channel_->stream);
  if (error.empty() && r != cuda::kSuccess) error = cuda::describe(r, "cuStreamSynchronize");
  if (!error.empty()) error += " staging into GPU " + std::to_string(device_);
  return error;
}

}  // namespace mori::io::gpu
