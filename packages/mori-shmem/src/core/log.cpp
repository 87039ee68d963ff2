// SPDX-License-Identifier: MIT
#include "core/log.hpp"

#include <cstdio>

#include "core/env.hpp"

namespace mori::shmem::log {

namespace {

Level threshold() {
  std::string name;
  try {
    name = env::get_choice("MORI_LOG_LEVEL");
  } catch (...) {
    return Level::Warning;  // a bad value is reported by init; logging must not throw
  }
  if (name == "debug") return Level::Debug;
  if (name == "info") return Level::Info;
  if (name == "warning") return Level::Warning;
  return Level::Error;
}

const char* label(Level level) {
  switch (level) {
    case Level::Debug: return "DEBUG";
    case Level::Info: return "INFO";
    case Level::Warning: return "WARNING";
    case Level::Error: return "ERROR";
  }
  return "?";
}

}  // namespace

bool enabled(Level level) { return static_cast<int>(level) >= static_cast<int>(threshold()); }

void write(Level level, const std::string& message) {
  std::fprintf(stderr, "mori.shmem %s: %s\n", label(level), message.c_str());
}

}  // namespace mori::shmem::log
