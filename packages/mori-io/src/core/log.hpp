// SPDX-License-Identifier: MIT
// Native log lines go to stderr, filtered by the level Python sets from MORI_LOG_LEVEL
// (mori.io.settings). Not routed through Python logging: IO threads would then need the GIL,
// which can deadlock against an engine destructor that joins them while holding it.
#pragma once

#include <atomic>
#include <cstdio>
#include <sstream>
#include <string>

namespace mori::io::log {

enum class Level : int { Debug = 10, Info = 20, Warning = 30, Error = 40, Critical = 50 };

inline std::atomic<int>& threshold() {
  static std::atomic<int> level{static_cast<int>(Level::Warning)};
  return level;
}

inline bool enabled(Level level) { return static_cast<int>(level) >= threshold().load(std::memory_order_relaxed); }

inline void write(Level level, const std::string& message) {
  const char* label = level == Level::Debug     ? "DEBUG"
                      : level == Level::Info    ? "INFO"
                      : level == Level::Warning ? "WARNING"
                      : level == Level::Error   ? "ERROR"
                                                : "CRITICAL";
  std::fprintf(stderr, "mori.io %s: %s\n", label, message.c_str());
}

}  // namespace mori::io::log

#define MORI_IO_LOG(level, expr)                                  \
  do {                                                            \
    if (::mori::io::log::enabled(::mori::io::log::Level::level)) { \
      std::ostringstream mori_io_log_stream;                      \
      mori_io_log_stream << expr;                                 \
      ::mori::io::log::write(::mori::io::log::Level::level, mori_io_log_stream.str()); \
    }                                                             \
  } while (0)
