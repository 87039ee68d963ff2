// SPDX-License-Identifier: MIT
// MORI's IOEngine.wait_all over the native statuses.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.hpp"

namespace mori::io {

// Waits for every status, within timeout_ms in all (negative: no limit; 0 polls once): the first
// failure wins, an empty list succeeds, and a timeout returns IN_PROGRESS unless a status failed.
StatusCode wait_all(const std::vector<std::shared_ptr<TransferStatus>>& statuses, int64_t timeout_ms);

}  // namespace mori::io
