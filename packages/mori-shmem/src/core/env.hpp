// SPDX-License-Identifier: MIT
// The one registry of environment variables of mori-shmem (env.cpp declares each with its type,
// default and doc). Code reads variables only through these getters; asking for a name that is
// not registered is a programming error and throws MORI_SHMEM_ERR_INTERNAL. A value that does not
// parse throws MORI_SHMEM_ERR_CONFIG naming the variable, the value and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mori::shmem::env {

enum class Type { String, Size, Seconds, Bool, Int, Choice };

struct Var {
  const char* name;
  Type type;
  const char* default_value;
  const char* doc;
  const char* choices;  // comma separated, for Type::Choice; nullptr otherwise
};

const std::vector<Var>& registry();
const char* type_name(Type type);

// The raw effective text: the environment's value if set and non-empty, else the default.
std::string effective(const char* name);
// Whether the environment sets the variable (non-empty), i.e. the default is not in force.
bool is_set(const char* name);

std::string get_string(const char* name);
std::string get_choice(const char* name);  // lower-cased, validated against choices
uint64_t get_size(const char* name);       // "6G", "512M", "4096", "1.5GiB"
double get_seconds(const char* name);      // "30", "2.5", "500ms", "1m"
bool get_bool(const char* name);           // 1/0, true/false, yes/no, on/off
int64_t get_int(const char* name);

// Size strings: binary units K/M/G/T with optional B / iB suffix, case-insensitive; decimals
// allowed before the unit; result rounded down to whole bytes. Throws INVALID_ARGUMENT.
uint64_t parse_size(const std::string& text);

}  // namespace mori::shmem::env
