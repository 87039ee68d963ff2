// SPDX-License-Identifier: MIT
#include "core/log.hpp"

#include <cstdio>
#include <cstdlib>

#include "core/env.hpp"

namespace mori::shmem::log {

namespace {

Level threshold() {
  std::string name;
  try {
    name = env::get_choice("MORI_LOG_LEVEL");
    // MORI's variable counts only where ours is not set, as for the Python loggers (mori._logging).
    const std::string global = env::get_choice("MORI_GLOBAL_LOG_LEVEL");
    if (!global.empty() && std::getenv("MORI_LOG_LEVEL") == nullptr) name = global;
  } catch (...) {
    return Level::Warning;  // a bad value is reported by init; logging must not throw
  }
  if (name == "debug" || name == "trace") return Level::Debug;
  if (name == "info") return Level::Info;
  if (name == "warning" || name == "warn") return Level::Warning;
  if (name == "error") return Level::Error;
  return Level::Silent;
}

const char* label(Level level) {
  switch (level) {
    case Level::Debug: return "DEBUG";
    case Level::Info: return "INFO";
    case Level::Warning: return "WARNING";
    case Level::Error: return "ERROR";
    case Level::Silent: break;
  }
  return "?";
}

}  // namespace

bool enabled(Level level) { return static_cast<int>(level) >= static_cast<int>(threshold()); }

void write(Level level, const std::string& message) {
  std::fprintf(stderr, "mori.shmem %s: %s\n", label(level), message.c_str());
}

}  // namespace mori::shmem::log
