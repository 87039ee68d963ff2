// SPDX-License-Identifier: MIT
#include "tcp/frames.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace mori::io {

void TransferOp::frame_done(StatusCode code, const std::string& message) {
  if (is_error(code)) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!is_error(error)) {
      error = code;
      error_message = message;
    }
  }
  if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard<std::mutex> lock(mutex);
    status->update(is_error(error) ? error : StatusCode::SUCCESS, error_message);
  }
}

namespace {

std::shared_ptr<Frame> new_frame(const std::shared_ptr<TransferOp>& op, bool is_read, uint64_t uid,
                                 uint32_t remote_mem_id, const std::shared_ptr<Region>& local) {
  auto frame = std::make_shared<Frame>();
  frame->op = op;
  frame->wire.reserve(net::kFrameHeaderBytes + net::kSegmentBytes);  // one allocation for one segment
  frame->header.type = is_read ? net::FrameType::Read : net::FrameType::Write;
  frame->header.uid = uid;
  frame->header.mem_id = remote_mem_id;
  frame->pin = RegionPin(local);
  frame->wire.resize(net::kFrameHeaderBytes);
  return frame;
}

}  // namespace

void build_frames(const std::shared_ptr<TransferOp>& op, bool is_read, uint64_t uid, uint32_t remote_mem_id,
                  const std::vector<Segment>& segments, const std::shared_ptr<Region>& local, const FramePlan& plan,
                  std::vector<std::shared_ptr<Frame>>& frames) {
  if (plan.frame_bytes == 0 || plan.max_segments == 0) throw Error(Code::Internal, "empty frame plan");
  const size_t first = frames.size();
  std::shared_ptr<Frame> frame = new_frame(op, is_read, uid, remote_mem_id, local);
  auto flush = [&] {
    frames.push_back(frame);
    frame = new_frame(op, is_read, uid, remote_mem_id, local);
  };
  thread_local std::vector<Segment> runs;
  merge_runs(segments, runs);
  for (Segment s : runs) {
    while (s.size > 0) {
      if (frame->header.payload == plan.frame_bytes || frame->header.nseg == plan.max_segments) flush();
      uint64_t take = std::min(s.size, plan.frame_bytes - frame->header.payload);
      uint8_t entry[net::kSegmentBytes];
      net::put_u64(entry, s.remote_offset);
      net::put_u64(entry + 8, take);
      frame->wire.insert(frame->wire.end(), entry, entry + sizeof(entry));
      frame->local.push_back(iovec{local->at(s.local_offset), take});
      frame->header.payload += take;
      ++frame->header.nseg;
      s.local_offset += take;
      s.remote_offset += take;
      s.size -= take;
    }
  }
  if (frame->header.nseg > 0 || frames.size() == first) frames.push_back(frame);
  auto total = static_cast<uint32_t>(frames.size() - first);
  for (uint32_t i = 0; i < total; ++i) {
    Frame& f = *frames[first + i];
    f.header.seq = i;
    f.header.total = total;
    net::encode_header(f.header, f.wire.data());
  }
}

}  // namespace mori::io
