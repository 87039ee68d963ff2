// SPDX-License-Identifier: MIT
#include "core/settings.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "core/error.hpp"
#include "mori_shmem/mori_shmem.h"

namespace mori::cco::settings {

const std::vector<Var>& registry() {
  static const std::vector<Var> vars = {
      {"MORI_CCO_BACKEND", "choice", "auto",
       "Where communicators live: cuda (GPU memory, kernels), cpu (shared memory, host threads), or auto "
       "(cuda when a GPU is visible).",
       "auto,cpu,cuda"},
      {"MORI_CCO_PER_RANK_VMM", "size", "4G",
       "Bytes of each rank's slot of the flat address range when init() is given 0; only what is allocated is "
       "backed by memory.",
       nullptr},
      {"MORI_CCO_TIMEOUT", "seconds", "60",
       "Bound of every wait on a peer (barriers, signals, collectives); past it the wait fails instead of hanging.",
       nullptr},
      {"MORI_CCO_CE_QUEUES", "int", "2",
       "Copy-engine queues per LSA peer when a dev comm asks for 0 (MORI's MORI_SDMA_NUM_CHANNELS).", nullptr},
      {"MORI_SDMA_NUM_CHANNELS", "int", "0",
       "MORI's name for MORI_CCO_CE_QUEUES, used when that is not set (0: not set).", nullptr},
      {"MORI_ENABLE_SDMA", "int", "0",
       "MORI's switch for its SDMA copy engine: accepted with no effect, mori-cco's copy engine is always "
       "available (docs/user-guide/compatibility.md).",
       nullptr},
      {"MORI_CCO_BLOCKS", "int", "0",
       "Thread blocks of every collective kernel of a communicator (fixed per communicator); 0: the SMs the "
       "rank may use (its share when ranks share one GPU), between 8 and 64.",
       nullptr},
      {"MORI_CCO_RANKS_PER_NODE", "int", "0",
       "Treat ranks rank/N as nodes (one host standing for several, like MORI's gpu_per_node): ranks of "
       "different nodes reach each other through the GDA path only. 0 groups ranks by host name.",
       nullptr},
      {"MORI_CCO_ONE_SHOT_MAX", "size", "1M",
       "all_reduce(algorithm='auto') uses the one-shot algorithm up to this many bytes, two-shot above.", nullptr},
      {"MORI_CCO_FABRIC_DISABLE", "int", "0",
       "MORI's switch to keep LSA teams to one host: not 0 makes this rank ignore MORI_VPOD_ID and "
       "MORI_CCO_FABRIC_CROSSNODE_LSA (teams by host name or MORI_CCO_RANKS_PER_NODE).",
       nullptr},
      {"MORI_VPOD_ID", "int", "",
       "MORI's manual LSA teams: ranks with the same id form one team (over MORI_CCO_RANKS_PER_NODE and host "
       "names). Every rank or none sets it; teams are contiguous rank blocks of one size, each on one machine.",
       nullptr},
      {"MORI_CCO_FABRIC_CROSSNODE_LSA", "int", "0",
       "MORI's whole-world LSA team: not 0 (and MORI_VPOD_ID unset) puts every rank in one team, which must "
       "run on one machine.",
       nullptr},
      {"MORI_CCO_FABRIC_LENIENT", "int", "0",
       "MORI's leave to go on when mapping an LSA peer on another host fails: accepted with no effect, LSA "
       "teams never span machines here (docs/user-guide/compatibility.md).",
       nullptr},
      {"MORI_CCO_BC", "string", "",
       "MORI's prebuilt FlyDSL device bitcode: accepted with no effect, kernels are compiled from the CUDA "
       "device headers by mori-shmem's JIT (docs/user-guide/compatibility.md).",
       nullptr},
  };
  return vars;
}

namespace {

const Var& lookup(const char* name) {
  for (const Var& var : registry()) {
    if (std::string(var.name) == name) return var;
  }
  fail(ccoInvalidArgument, name, " is not a registered mori-cco setting");
}

[[noreturn]] void bad_value(const Var& var, const std::string& value, const char* expected) {
  fail(ccoInvalidArgument, var.name, "=", value, " is not ", expected);
}

}  // namespace

std::string effective(const char* name) {
  const Var& var = lookup(name);
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : std::string(var.default_value);
}

std::string get_choice(const char* name) {
  const Var& var = lookup(name);
  std::string value = effective(name);
  std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return std::tolower(c); });
  std::stringstream choices(var.choices);
  for (std::string choice; std::getline(choices, choice, ',');) {
    if (choice == value) return value;
  }
  fail(ccoInvalidArgument, name, "=", value, " is not one of ", var.choices);
}

uint64_t get_size(const char* name) {
  const std::string value = effective(name);
  uint64_t bytes = 0;
  if (mori_shmem_parse_size(value.c_str(), &bytes) != MORI_SHMEM_SUCCESS) {
    bad_value(lookup(name), value, "a size (4096, 512M, 4G)");
  }
  return bytes;
}

double get_seconds(const char* name) {
  const std::string value = effective(name);
  char* end = nullptr;
  const double number = std::strtod(value.c_str(), &end);
  const std::string unit = end == nullptr ? "" : std::string(end);
  const double scale = unit.empty() || unit == "s" ? 1.0 : unit == "ms" ? 1e-3 : unit == "m" ? 60.0 : -1.0;
  if (end == value.c_str() || scale < 0 || number < 0) bad_value(lookup(name), value, "a duration (30, 2.5, 500ms, 1m)");
  return number * scale;
}

int64_t get_int(const char* name) {
  const std::string value = effective(name);
  char* end = nullptr;
  const long long number = std::strtoll(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || number < 0) bad_value(lookup(name), value, "a non-negative integer");
  return number;
}

std::optional<int64_t> get_optional_int(const char* name) {
  if (effective(name).empty()) return std::nullopt;
  return get_int(name);
}

int64_t ce_queues() {
  const char* ours = std::getenv("MORI_CCO_CE_QUEUES");
  if (ours == nullptr || *ours == '\0') {
    const int64_t mori_channels = get_int("MORI_SDMA_NUM_CHANNELS");
    if (mori_channels > 0) return mori_channels;
  }
  return get_int("MORI_CCO_CE_QUEUES");
}

}  // namespace mori::cco::settings
