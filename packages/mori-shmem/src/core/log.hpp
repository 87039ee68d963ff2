// SPDX-License-Identifier: MIT
// Native log lines go to stderr, filtered by MORI_LOG_LEVEL like the Python loggers, so a message
// from C++ and one from Python read alike ("mori.shmem WARNING: ...").
#pragma once

#include <sstream>
#include <string>

namespace mori::shmem::log {

// Silent is a threshold only (MORI_LOG_LEVEL=critical or off): the library writes nothing critical.
enum class Level { Debug = 10, Info = 20, Warning = 30, Error = 40, Silent = 50 };

bool enabled(Level level);
void write(Level level, const std::string& message);

template <typename... Parts>
void emit(Level level, Parts&&... parts) {
  if (!enabled(level)) return;
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  write(level, out.str());
}

}  // namespace mori::shmem::log
