// SPDX-License-Identifier: MIT
#include "engine/wait.hpp"

#include <algorithm>
#include <chrono>

namespace mori::io {

StatusCode wait_all(const std::vector<std::shared_ptr<TransferStatus>>& statuses, int64_t timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  bool timed_out = false;
  for (const auto& status : statuses) {
    int64_t left = -1;
    if (timeout_ms >= 0) {
      left = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    }
    StatusCode code = status->wait_for(left);
    if (is_error(code)) return code;
    if (code != StatusCode::SUCCESS) timed_out = true;
  }
  if (!timed_out) return StatusCode::SUCCESS;
  for (const auto& status : statuses) {  // a failure anywhere wins over "still running"
    StatusCode code = status->code();
    if (is_error(code)) return code;
  }
  return StatusCode::IN_PROGRESS;
}

}  // namespace mori::io
