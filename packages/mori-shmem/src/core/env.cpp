// SPDX-License-Identifier: MIT
#include "core/env.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

namespace mori::shmem::env {

const std::vector<Var>& registry() {
  static const std::vector<Var> vars = {
      {"MORI_SHMEM_HEAP_SIZE", Type::Size, "4G",
       "Bytes of symmetric heap per PE (e.g. 6G, 512M, 4096). POSIX shared memory, allocated lazily.", nullptr},
      {"MORI_SHMEM_BACKEND", Type::Choice, "auto",
       "Heap and transport backend: cuda (GPU heap, P2P over CUDA IPC), cpu (POSIX shared memory); auto takes "
       "cuda when a CUDA driver and a GPU are present, else cpu.",
       "auto,cpu,cuda"},
      {"MORI_SHMEM_MODE", Type::Choice, "static_heap",
       "How the cuda backend backs the heap: static_heap (one cuMemAlloc, shared by CUDA IPC handles) or vmm_heap "
       "(cuMemCreate chunks mapped into one reserved range, shared by POSIX file descriptors). Unset, a job whose "
       "PEs span nodes takes vmm_heap: the device proxy then never waits for the application's CUDA calls.",
       "static_heap,vmm_heap,static,vmm"},
      {"MORI_SHMEM_HEAP_TYPE", Type::Choice, "uncached",
       "MORI's uncached/normal heap types; CUDA has no uncached device memory, so both give ordinary device memory "
       "and device flags are read with system-scope acquire loads instead.",
       "uncached,normal"},
      {"MORI_SHMEM_VMM_CHUNK_SIZE", Type::Size, "0",
       "Granule of the vmm_heap mode's physical chunks; 0 picks the driver's recommended granularity.", nullptr},
      {"MORI_SHMEM_DEVICE", Type::Int, "-1",
       "CUDA device of this PE; -1 takes the context current at init (e.g. torch.cuda.set_device), else rank modulo "
       "the device count.",
       nullptr},
      {"MORI_SHMEM_DEVICE_SPIN_TIMEOUT", Type::Seconds, "60",
       "Bound of every device-side spin (wait_until, device barrier): past it the kernel sets an error word that "
       "the host raises as WaitTimeoutError; 0 spins forever.",
       nullptr},
      {"MORI_JIT_CACHE_DIR", Type::String, "",
       "Where compiled device code is cached, by content hash; empty means ~/.cache/mori/jit.", nullptr},
      {"MORI_JIT_COMPILER", Type::Choice, "auto",
       "Device compiler of the JIT: nvrtc (the nvidia-cuda-nvrtc wheel or the toolkit's libnvrtc), nvcc, or auto "
       "(nvrtc when found, else nvcc).",
       "auto,nvrtc,nvcc"},
      {"MORI_JIT_ARCH", Type::String, "",
       "Target of the JIT, e.g. sm_90; empty means the current GPU's, or sm_90 when there is no GPU.", nullptr},
      {"MORI_JIT_NVCC", Type::String, "", "Path of nvcc; empty searches CUDA_HOME/bin, then PATH.", nullptr},
      {"MORI_JIT_EXTRA_FLAGS", Type::String, "",
       "Extra compiler options (space separated) appended to every JIT compile; part of the cache key.", nullptr},
      {"MORI_SOCKET_IFNAME", Type::String, "",
       "Network interface the bootstrap and the remote transport listen on; empty means loopback (127.0.0.1).",
       nullptr},
      {"MORI_SHMEM_REMOTE_CONDUIT", Type::Choice, "auto",
       "What carries the remote transport (PEs on other hosts): ucx (UCX's UCP, opened at run time: RDMA verbs where "
       "that UCX has them, else tcp), tcp (mori's own authenticated TCP conduit), or auto (ucx when UCX loads and "
       "initialises on every PE and the heap is host memory, else tcp, with an INFO line saying why).",
       "auto,ucx,tcp"},
      {"MORI_SHMEM_UCX_DIR", Type::String, "",
       "Directory of the UCX libraries (libucp.so.0 beside libucs and libuct) for the ucx conduit; the Python layer "
       "fills in the libucx wheel's (libucx-cu12) when it is installed and this is unset; empty means the system's "
       "libucp.so.0.",
       nullptr},
      {"MORI_SHMEM_UCX_ATOMICS", Type::Choice, "auto",
       "How the ucx conduit applies atomics and signals: am (an active message that the target applies to its heap "
       "itself and answers; atomic with node-mates' load/store atomics, any transport, GPU heaps too), ucx "
       "(ucp_atomic_op_nbx: needs NIC atomics, which are not atomic with node-mates' CPU atomics); auto means am.",
       "auto,ucx,am"},
      {"MORI_RDMA_DEVICES", Type::String, "",
       "RDMA devices the ucx conduit of the remote transport may use, as MORI reads it: mlx5_0,mlx5_1 keeps these "
       "(in this order), ^mlx5_2,mlx5_3 all but these; a name may carry :port (mlx5_1:2). Passed to UCX as its "
       "NET_DEVICES with the MORI_SOCKET_IFNAME interface; UCX_NET_DEVICES, when set, overrides it. Empty: every "
       "device.",
       nullptr},
      {"MORI_SHMEM_REMOTE_STREAMS", Type::Int, "2",
       "TCP connections per remote PE of the tcp conduit (PEs on other hosts); transfers above 512 KiB are striped "
       "over them.",
       nullptr},
      {"MORI_SHMEM_REMOTE_SERVE_SPIN_US", Type::Int, "0",
       "Microseconds (0..1000) a tcp conduit's serving thread keeps looking for the next request on its connection "
       "before it sleeps until one comes: a sleeping thread's wake-up is much of a small request's latency on an idle "
       "host, and each spin costs a core that long. 0 never spins.",
       nullptr},
      {"MORI_NUM_QP_PER_PE", Type::Int, "0",
       "MORI's queue pairs per remote PE. With the tcp conduit: its connections per remote PE when "
       "MORI_SHMEM_REMOTE_STREAMS is not set (1..64; 0 = unset). The ucx conduit keeps one endpoint per PE, whose "
       "lanes UCX chooses, and ignores it.",
       nullptr},
      {"MORI_SHMEM_PES_PER_NODE", Type::Int, "0",
       "Treat PEs rank/N as nodes (one host standing for several, like MORI's gpu_per_node): PEs of different "
       "nodes talk through the remote transport. 0 groups PEs by host.",
       nullptr},
      {"MORI_NODE_ID", Type::String, "",
       "This PE's node (co-location key) instead of its host's boot id and name; PEs with different ids use the "
       "remote transport.",
       nullptr},
      {"MORI_DISABLE_P2P", Type::Bool, "0",
       "Reach every other PE through the remote transport, even on the same host (tests the network path on one "
       "machine).",
       nullptr},
      {"MORI_BOOTSTRAP_TIMEOUT", Type::Seconds, "60",
       "Deadline for the rendezvous and for each bootstrap collective (barrier, malloc check).", nullptr},
      {"MORI_SHMEM_WAIT_TIMEOUT", Type::Seconds, "300",
       "Default deadline of shmem_wait_until on the host; a peer that never signals gives an error, not a hang.",
       nullptr},
      {"MORI_SHMEM_CHECK_SYMMETRY", Type::Bool, "1",
       "Verify with an allgather that every PE got the same heap offset from malloc/free.", nullptr},
      {"MORI_LOG_LEVEL", Type::Choice, "WARNING", "Log level of mori's native and Python code.",
       "trace,debug,info,warn,warning,error,critical,off"},
      {"MORI_GLOBAL_LOG_LEVEL", Type::Choice, "",
       "MORI's log level variable (spdlog names): used when MORI_LOG_LEVEL is not set.",
       ",trace,debug,info,warn,warning,error,critical,off"},
  };
  return vars;
}

const char* type_name(Type type) {
  switch (type) {
    case Type::String: return "string";
    case Type::Size: return "size";
    case Type::Seconds: return "seconds";
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Choice: return "choice";
  }
  return "?";
}

namespace {

const Var& lookup(const char* name) {
  for (const Var& var : registry()) {
    if (std::strcmp(var.name, name) == 0) return var;
  }
  throw_error(MORI_SHMEM_ERR_INTERNAL, "environment variable ", name, " is not in mori-shmem's registry");
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

std::string trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\n");
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(" \t\n");
  return text.substr(begin, end - begin + 1);
}

[[noreturn]] void bad_value(const Var& var, const std::string& value, const char* expected) {
  throw_error(MORI_SHMEM_ERR_CONFIG, var.name, "=", value, " is not valid: expected ", expected);
}

// Splits "1.5GiB" into a number and a unit; returns false if the number part is missing.
bool split_number(const std::string& text, double* number, std::string* unit) {
  char* end = nullptr;
  *number = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) return false;
  *unit = lower(trim(end));
  return std::isfinite(*number);
}

}  // namespace

std::string effective(const char* name) {
  const Var& var = lookup(name);
  const char* value = std::getenv(var.name);
  if (value == nullptr || value[0] == '\0') return var.default_value;
  return value;
}

bool is_set(const char* name) {
  const char* value = std::getenv(lookup(name).name);
  return value != nullptr && value[0] != '\0';
}

std::string get_string(const char* name) { return effective(name); }

std::string get_choice(const char* name) {
  const Var& var = lookup(name);
  std::string value = lower(trim(effective(name)));
  std::string choices = var.choices;
  size_t start = 0;
  while (start <= choices.size()) {
    size_t comma = choices.find(',', start);
    if (comma == std::string::npos) comma = choices.size();
    if (choices.compare(start, comma - start, value) == 0) return value;
    start = comma + 1;
  }
  bad_value(var, effective(name), (std::string("one of ") + var.choices).c_str());
}

uint64_t parse_size(const std::string& text) {
  const std::string body = trim(text);
  // Grammar: digits [ "." digits ] [ unit ]; parsed by hand so that hex, signs and exponents,
  // which strtod would take, are refused.
  size_t pos = 0;
  uint64_t whole = 0;
  bool overflow = false;
  while (pos < body.size() && std::isdigit(static_cast<unsigned char>(body[pos]))) {
    const uint64_t digit = static_cast<uint64_t>(body[pos] - '0');
    if (whole > (UINT64_MAX - digit) / 10) overflow = true;
    whole = whole * 10 + digit;
    ++pos;
  }
  const size_t whole_digits = pos;
  double fraction = 0;
  if (pos < body.size() && body[pos] == '.') {
    double scale = 0.1;
    ++pos;
    const size_t fraction_start = pos;
    while (pos < body.size() && std::isdigit(static_cast<unsigned char>(body[pos]))) {
      fraction += (body[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == fraction_start) pos = std::string::npos;
  }
  if (whole_digits == 0 || pos == std::string::npos) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "size '", text,
                "' is not a size: expected a non-negative number with an optional unit K, M, G or T "
                "(KB/KiB/... are the same binary units), e.g. 512M or 6G");
  }
  const std::string unit = lower(body.substr(pos));
  static const struct {
    const char* suffixes[3];
    int shift;
  } units[] = {{{"", "b", nullptr}, 0},      {{"k", "kb", "kib"}, 10}, {{"m", "mb", "mib"}, 20},
               {{"g", "gb", "gib"}, 30},     {{"t", "tb", "tib"}, 40}};
  for (const auto& entry : units) {
    for (const char* suffix : entry.suffixes) {
      if (suffix == nullptr || unit != suffix) continue;
      const uint64_t limit = UINT64_MAX >> entry.shift;
      if (overflow || whole > limit || (whole == limit && fraction > 0)) {
        throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "size '", text, "' does not fit in 64 bits");
      }
      const auto extra = static_cast<uint64_t>(std::ldexp(fraction, entry.shift));
      return (whole << entry.shift) + extra;
    }
  }
  throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "size '", text, "' has an unknown unit '", unit,
              "': expected K, M, G or T (optionally followed by B or iB)");
}

uint64_t get_size(const char* name) {
  const Var& var = lookup(name);
  try {
    return parse_size(effective(name));
  } catch (const Error&) {
    bad_value(var, effective(name), "a size such as 4096, 512M or 6G");
  }
}

double get_seconds(const char* name) {
  const Var& var = lookup(name);
  std::string text = effective(name);
  double number = 0;
  std::string unit;
  if (!split_number(trim(text), &number, &unit) || number < 0) bad_value(var, text, "seconds, e.g. 30, 2.5, 500ms");
  if (unit.empty() || unit == "s") return number;
  if (unit == "ms") return number / 1000.0;
  if (unit == "m" || unit == "min") return number * 60.0;
  bad_value(var, text, "seconds, e.g. 30, 2.5, 500ms, 2m");
}

bool get_bool(const char* name) {
  const Var& var = lookup(name);
  std::string value = lower(trim(effective(name)));
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off") return false;
  bad_value(var, effective(name), "1/0, true/false, yes/no or on/off");
}

int64_t get_int(const char* name) {
  const Var& var = lookup(name);
  std::string text = trim(effective(name));
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') bad_value(var, text, "an integer");
  return value;
}

}  // namespace mori::shmem::env
