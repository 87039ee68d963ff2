// SPDX-License-Identifier: MIT
// mori-cco's one registry of environment variables: each with its type, default and doc, read
// only through these getters (Python reads them through _C.setting, `mori-cco env` lists them).
// A value that does not parse throws ccoInvalidArgument naming the variable, value and expectation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mori::cco::settings {

struct Var {
  const char* name;
  const char* type;  // "choice", "size", "seconds", "int", "string"
  const char* default_value;
  const char* doc;
  const char* choices;  // comma separated, "choice" only
};

const std::vector<Var>& registry();
std::string effective(const char* name);  // the environment's value when set and non-empty
std::string get_choice(const char* name);
uint64_t get_size(const char* name);
double get_seconds(const char* name);
int64_t get_int(const char* name);
// An "int" whose default is "" (not set): nullopt when unset or empty.
std::optional<int64_t> get_optional_int(const char* name);
// Copy-engine queues per LSA peer when a dev comm asks for 0: MORI_CCO_CE_QUEUES when set, else
// MORI's MORI_SDMA_NUM_CHANNELS when set, else MORI_CCO_CE_QUEUES's default.
int64_t ce_queues();

}  // namespace mori::cco::settings
