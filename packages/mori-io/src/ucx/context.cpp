// SPDX-License-Identifier: MIT
#include "ucx/context.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "ucx/loader.hpp"

namespace mori::io::ucx {

Context::Context(const ContextOptions& options) : api_(load(options.lib_dir)) {
  ucp_config_t* config = nullptr;
  ucs_status_t status = api_.ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) throw Error(Code::Unsupported, "ucp_config_read failed: " + describe(api_, status));
  if (!options.net_devices.empty()) {
    status = api_.ucp_config_modify(config, "NET_DEVICES", options.net_devices.c_str());
    if (status != UCS_OK) {
      api_.ucp_config_release(config);
      throw Error(Code::Unsupported, "UCX rejected NET_DEVICES=" + options.net_devices + ": " + describe(api_, status));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  // WAKEUP: the worker thread sleeps on UCX's event fd whenever nothing is in flight.
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.name = options.name.c_str();
  // The API minor of the library loaded, not of the 1.22 headers these declarations follow: an
  // older libucp would otherwise warn that the application wants a newer API.
  status = api_.ucp_init_version(api_.major, api_.minor, &params, config, &context_);
  api_.ucp_config_release(config);
  if (status != UCS_OK) {
    throw Error(Code::Unsupported, "ucp_init failed: " + describe(api_, status) +
                                       " (check UCX_TLS / UCX_NET_DEVICES; `ucx_info -d` lists the transports)");
  }
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (api_.ucp_context_query(context_, &attr) == UCS_OK) {
    cuda_ = (attr.memory_types & bit(UCS_MEMORY_TYPE_CUDA)) != 0;
  }
  MORI_IO_LOG(Debug, "UCP context '" << options.name << "' (UCX " << api_.major << "." << api_.minor << "."
                                     << api_.release << "), CUDA memory " << (cuda_ ? "supported" : "not supported"));
}

Context::~Context() {
  if (context_ != nullptr) api_.ucp_cleanup(context_);
}

void Context::check(ucs_status_t status, const char* call) const {
  if (status != UCS_OK) throw Error(Code::System, std::string(call) + " failed: " + describe(api_, status));
}

ucp_mem_h Context::map(uintptr_t address, uint64_t length, bool gpu) const {
  ucp_mem_map_params_t params{};
  params.field_mask =
      UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = reinterpret_cast<void*>(address);
  params.length = length;
  params.memory_type = gpu ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  ucp_mem_h memh = nullptr;
  check(api_.ucp_mem_map(context_, &params, &memh), "ucp_mem_map");
  return memh;
}

void Context::unmap(ucp_mem_h memh) const {
  ucs_status_t status = api_.ucp_mem_unmap(context_, memh);
  if (status != UCS_OK) MORI_IO_LOG(Warning, "ucp_mem_unmap failed: " << describe(api_, status));
}

std::string Context::pack_rkey(ucp_mem_h memh) const {
  void* buffer = nullptr;
  size_t size = 0;
  check(api_.ucp_rkey_pack(context_, memh, &buffer, &size), "ucp_rkey_pack");
  std::string out(static_cast<const char*>(buffer), size);
  api_.ucp_rkey_buffer_release(buffer);
  return out;
}

}  // namespace mori::io::ucx
