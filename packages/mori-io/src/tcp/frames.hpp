// SPDX-License-Identifier: MIT
// One transfer (a read, a write or one pair's batch) cut into frames that travel on the lanes of
// a peer link. The transfer's status becomes final when every frame has reported, and it is an
// error if any frame failed.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "core/segment.hpp"
#include "core/status.hpp"
#include "net/protocol.hpp"
#include "net/socket.hpp"

namespace mori::io {

class PeerLink;

struct TransferOp {
  std::shared_ptr<TransferStatus> status;
  std::atomic<uint32_t> remaining{0};
  net::Deadline deadline = net::never();
  std::weak_ptr<PeerLink> link;
  uint64_t uid = 0;
  int64_t timeout_ms = 0;

  std::mutex mutex;
  StatusCode error = StatusCode::SUCCESS;
  std::string error_message;

  void frame_done(StatusCode code, const std::string& message);
};

struct Frame {
  std::shared_ptr<TransferOp> op;
  net::FrameHeader header;
  std::vector<uint8_t> wire;  // encoded header + segment table
  std::vector<iovec> local;   // where the payload comes from (write) or goes to (read)
  RegionPin pin;
  std::atomic<bool> reported{false};

  bool is_read() const { return header.type == net::FrameType::Read; }
  // Local bytes in GPU memory travel through pinned staging buffers (gpu/staging.hpp).
  bool on_gpu() const { return pin && pin.get()->loc == MemoryLocation::GPU; }
  // Reports at most once, whichever thread gets there first.
  void complete(StatusCode code, const std::string& message) {
    if (!reported.exchange(true)) op->frame_done(code, message);
  }
};

struct FramePlan {
  uint64_t frame_bytes;   // most payload bytes in one frame
  uint32_t max_segments;  // most segments in one frame
};

// Merges segments that continue the previous one on both sides, then cuts the list into frames
// of at most plan.frame_bytes and plan.max_segments, appended to `frames`. Always at least one
// frame, so an empty transfer still reaches the target and shows up as an inbound completion.
void build_frames(const std::shared_ptr<TransferOp>& op, bool is_read, uint64_t uid, uint32_t remote_mem_id,
                  const std::vector<Segment>& segments, const std::shared_ptr<Region>& local, const FramePlan& plan,
                  std::vector<std::shared_ptr<Frame>>& frames);

}  // namespace mori::io
