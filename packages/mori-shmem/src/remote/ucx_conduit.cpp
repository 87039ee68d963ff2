// SPDX-License-Identifier: MIT
// The UCX conduit's setup, teardown, progress and waiting (NOTE [ucx conduit]); the operations are
// in ucx_rma.cpp.
#include "remote/ucx_conduit.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "core/back_off.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "remote/rdma_devices.hpp"

namespace mori::shmem::remote {

namespace {

constexpr int kIdlePollMs = 100;      // the progress thread wakes at least this often (keepalive)
constexpr double kCloseGraceS = 5;    // for a forced close to cancel what was outstanding
constexpr size_t kEndpointChars = 63;  // what shmem_remote_endpoint's callers make room for

constexpr const char* kSysfsRdma = "/sys/class/infiniband";

// What UCX_NET_DEVICES becomes unless the environment sets it: the bootstrap's interface (so UCX's
// tcp listeners are no more exposed than mori's own) plus the RDMA ports MORI_RDMA_DEVICES keeps
// (every port by default), which listen on no IP.
std::string net_devices(const std::string& ifname, const std::string& rdma_devices, int rank) {
  std::string devices = ifname.empty() ? "lo" : ifname;
  const RdmaPortSelection selection = select_rdma_ports(rdma_devices, kSysfsRdma);
  for (const std::string& port : selection.ports) devices += "," + port;
  if (!selection.unknown.empty()) {
    std::string unknown, available;
    for (const std::string& name : selection.unknown) unknown += (unknown.empty() ? "" : ", ") + name;
    for (const std::string& port : select_rdma_ports("", kSysfsRdma).ports) {
      available += (available.empty() ? "" : ", ") + port;
    }
    log::emit(log::Level::Warning, "PE ", rank, ": MORI_RDMA_DEVICES=", rdma_devices, ": no RDMA device or port ",
              unknown, " here (available: ", available.empty() ? "none" : available, ")");
  }
  if (!rdma_devices.empty()) {
    log::emit(log::Level::Info, "PE ", rank, ": MORI_RDMA_DEVICES=", rdma_devices, ": UCX may use ", devices);
  }
  return devices;
}

// Spin while an answer is imminent, then yield, then nap: waiting PEs must leave the CPU to the
// peers (and progress threads) that answer them on a machine with fewer cores than PEs.
void answer_back_off(uint64_t round) { back_off(round, 64, 2000); }

}  // namespace

UcxConduit::UcxConduit(int rank, int nranks, const LocalHeap& heap, uint64_t heap_size, const ConduitConfig& config)
    : api_(ucx::load(config.ucx_dir)),
      rank_(rank),
      heap_(heap),
      heap_size_(heap_size),
      config_(config),
      peers_(nranks) {
  const std::string& mode = config_.ucx_atomics;
  if (heap_.gpu && mode == "ucx") {
    throw_error(MORI_SHMEM_ERR_CONFIG, "MORI_SHMEM_UCX_ATOMICS=ucx: the heap is GPU memory, where UCX's (NIC) "
                "atomics are not atomic with the kernels' own; use am (or auto)");
  }
  am_atomics_ = mode != "ucx";
  if (pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) throw_system_error("pipe2");
  try {
    open_context();
    register_heap();
    register_am_handlers();
    start_progress();
  } catch (...) {
    close_all();
    throw;
  }
}

UcxConduit::~UcxConduit() { close_all(); }

void UcxConduit::open_context() {
  ucx::ucp_config_t* config = nullptr;
  ucx::ucs_status_t status = api_.ucp_config_read(nullptr, nullptr, &config);
  if (status != ucx::UCS_OK) throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "ucp_config_read: ", ucx::describe(api_, status));
  const auto modify = [&](const char* name, const std::string& value) {
    const std::string env = std::string("UCX_") + name;
    if (std::getenv(env.c_str()) != nullptr) return;  // the user's choice stands
    const ucx::ucs_status_t s = api_.ucp_config_modify(config, name, value.c_str());
    if (s != ucx::UCS_OK) log::emit(log::Level::Warning, "UCX ignored ", env, "=", value, ": ", ucx::describe(api_, s));
  };
  if (!config_.rdma_devices.empty() && std::getenv("UCX_NET_DEVICES") != nullptr) {
    log::emit(log::Level::Warning, "PE ", rank_, ": MORI_RDMA_DEVICES=", config_.rdma_devices,
              " is not applied: UCX_NET_DEVICES=", std::getenv("UCX_NET_DEVICES"), " chooses UCX's devices");
  }
  modify("NET_DEVICES", net_devices(config_.ifname, config_.rdma_devices, rank_));
  // UCX emulates RMA over tcp with active messages; its 8 KiB segments (tuned for messaging) cost
  // a round of progress each: 64 KiB / 256 KiB about tripled a put's bandwidth on loopback.
  modify("TCP_TX_SEG_SIZE", "64K");
  modify("TCP_RX_SEG_SIZE", "256K");
  ucx::ucp_params_t params{};
  params.field_mask = ucx::UCP_PARAM_FIELD_FEATURES | ucx::UCP_PARAM_FIELD_NAME;
  params.features = ucx::UCP_FEATURE_RMA | ucx::UCP_FEATURE_AMO32 | ucx::UCP_FEATURE_AMO64 | ucx::UCP_FEATURE_AM |
                    ucx::UCP_FEATURE_WAKEUP;
  const std::string name = "mori-shmem PE " + std::to_string(rank_);
  params.name = name.c_str();
  status = api_.ucp_init_version(ucx::kApiMajor, std::min(ucx::kApiMinor, api_.minor), &params, config, &context_);
  api_.ucp_config_release(config);
  if (status != ucx::UCS_OK) throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "ucp_init: ", ucx::describe(api_, status));

  ucx::ucp_context_attr_t attr{};
  attr.field_mask = ucx::UCP_ATTR_FIELD_MEMORY_TYPES;
  status = api_.ucp_context_query(context_, &attr);
  if (status != ucx::UCS_OK) throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "ucp_context_query: ", ucx::describe(api_, status));
  if (heap_.gpu && (attr.memory_types & (1ull << ucx::UCS_MEMORY_TYPE_CUDA)) == 0) {
    throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "the UCX at ", api_.origin,
                " has no CUDA memory support (its cuda transport did not load), so it cannot reach a GPU heap");
  }

  ucx::ucp_worker_params_t worker{};
  worker.field_mask = ucx::UCP_WORKER_PARAM_FIELD_THREAD_MODE | ucx::UCP_WORKER_PARAM_FIELD_NAME;
  worker.thread_mode = ucx::UCS_THREAD_MODE_SERIALIZED;  // mutex_ serialises every call
  worker.name = name.c_str();
  status = api_.ucp_worker_create(context_, &worker, &worker_);
  if (status != ucx::UCS_OK) throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "ucp_worker_create: ", ucx::describe(api_, status));
}

void UcxConduit::register_heap() {
  ucx::ucp_mem_map_params_t params{};
  params.field_mask = ucx::UCP_MEM_MAP_PARAM_FIELD_ADDRESS | ucx::UCP_MEM_MAP_PARAM_FIELD_LENGTH | ucx::UCP_MEM_MAP_PARAM_FIELD_PROT |
                      ucx::UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = heap_.base;
  params.length = heap_size_;
  params.prot = ucx::UCP_MEM_MAP_PROT_LOCAL_READ | ucx::UCP_MEM_MAP_PROT_LOCAL_WRITE | ucx::UCP_MEM_MAP_PROT_REMOTE_READ |
                ucx::UCP_MEM_MAP_PROT_REMOTE_WRITE;
  params.memory_type = heap_.gpu ? ucx::UCS_MEMORY_TYPE_CUDA : ucx::UCS_MEMORY_TYPE_HOST;
  const ucx::ucs_status_t status = api_.ucp_mem_map(context_, &params, &memh_);
  if (status != ucx::UCS_OK) {
    memh_ = nullptr;
    throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "ucp_mem_map of the ", heap_size_, "-byte ", heap_.gpu ? "GPU" : "host",
                " heap: ", ucx::describe(api_, status));
  }
}

void UcxConduit::start_progress() {
  const ucx::ucs_status_t status = api_.ucp_worker_get_efd(worker_, &event_fd_);
  if (status != ucx::UCS_OK) {
    throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "ucp_worker_get_efd: ", ucx::describe(api_, status),
                " (the progress thread needs the worker's event fd)");
  }
  progress_ = std::thread([this] { progress_loop(); });
}

void UcxConduit::progress_loop() {
  while (!stopping_.load(std::memory_order_relaxed)) {
    ucx::ucs_status_t armed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (api_.ucp_worker_progress(worker_) != 0) {
      }
      armed = api_.ucp_worker_arm(worker_);
    }
    if (armed == ucx::UCS_ERR_BUSY) continue;  // events arrived meanwhile: progress them first
    // No spinning here: on a machine with fewer cores than busy threads, a thread that polls on
    // after its work slows the peers it waits for (measured: the 8-byte ping-pong got slower).
    pollfd fds[2] = {{event_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (poll(fds, 2, kIdlePollMs) < 0 && errno != EINTR) {
      log::emit(log::Level::Error, "PE ", rank_, ": UCX progress thread stopped: poll: ", std::strerror(errno));
      return;
    }
  }
}

void UcxConduit::connect(Bootstrap& bootstrap, const std::vector<uint8_t>& remote) {
  // What each PE publishes: its worker address, its heap's rkey and where its heap starts.
  struct Card {
    uint64_t address_bytes;
    uint64_t rkey_bytes;
    uint64_t base;
    uint64_t heap_size;
  };
  ucx::ucp_worker_attr_t attr{};
  attr.field_mask = ucx::UCP_WORKER_ATTR_FIELD_ADDRESS;
  void* rkey = nullptr;
  size_t rkey_bytes = 0;
  ucx::ucp_worker_address_attr_t identity{};
  identity.field_mask = ucx::UCP_WORKER_ADDRESS_ATTR_FIELD_UID;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ucx::ucs_status_t status = api_.ucp_worker_query(worker_, &attr);
    if (status != ucx::UCS_OK) throw_error(MORI_SHMEM_ERR_SYSTEM, "ucp_worker_query: ", ucx::describe(api_, status));
    if (api_.ucp_worker_address_query(attr.address, &identity) != ucx::UCS_OK) identity.worker_uid = uint64_t(getpid());
    status = api_.ucp_rkey_pack(context_, memh_, &rkey, &rkey_bytes);
    if (status != ucx::UCS_OK) {
      api_.ucp_worker_release_address(worker_, attr.address);
      throw_error(MORI_SHMEM_ERR_SYSTEM, "ucp_rkey_pack: ", ucx::describe(api_, status));
    }
  }
  const Card mine{attr.address_length, rkey_bytes, reinterpret_cast<uint64_t>(heap_.base), heap_size_};
  const int nranks = bootstrap.nranks();
  std::vector<Card> cards(nranks);
  std::vector<uint8_t> blobs;
  size_t stride = 0;
  try {
    bootstrap.allgather(&mine, cards.data(), sizeof(Card), "remote: ucx card sizes");
    size_t most_address = 0, most_rkey = 0;
    for (const Card& card : cards) {
      most_address = std::max<size_t>(most_address, card.address_bytes);
      most_rkey = std::max<size_t>(most_rkey, card.rkey_bytes);
    }
    stride = most_address + most_rkey;
    std::vector<uint8_t> blob(stride, 0);
    std::memcpy(blob.data(), attr.address, attr.address_length);
    std::memcpy(blob.data() + most_address, rkey, rkey_bytes);
    blobs.resize(stride * nranks);
    bootstrap.allgather(blob.data(), blobs.data(), stride, "remote: ucx addresses and rkeys");
    for (int pe = 0; pe < nranks; ++pe) {
      if (cards[pe].heap_size != heap_size_) {
        throw_error(MORI_SHMEM_ERR_SYMMETRY, "PE ", pe, " has a ", cards[pe].heap_size, "-byte heap and PE ", rank_,
                    " one of ", heap_size_, " bytes");
      }
    }
    for (int pe = 0; pe < nranks; ++pe) {
      if (!remote[pe]) continue;
      peers_[pe] = std::make_unique<Peer>(this, pe, cards[pe].base);
      const uint8_t* card = blobs.data() + size_t(pe) * stride;
      connect_peer(*peers_[pe], card, card + most_address);
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    api_.ucp_rkey_buffer_release(rkey);
    api_.ucp_worker_release_address(worker_, attr.address);
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    api_.ucp_rkey_buffer_release(rkey);
    api_.ucp_worker_release_address(worker_, attr.address);
  }
  // One word read through every endpoint: the connection, the rkey and the target's progress work.
  // In ucx atomics mode, one atomic too (a fetch of the same word, which changes nothing): UCX
  // refuses them at run time when the transport has no NIC atomics.
  std::set<std::string> used;
  std::string detail;
  for (int pe = 0; pe < nranks; ++pe) {
    if (!peers_[pe]) continue;
    uint64_t word = 0;
    get(pe, 0, &word, sizeof(word));
    if (!am_atomics_) {
      try {
        ucx_atomic(*peers_[pe], 0, MORI_SHMEM_AMO_FETCH, MORI_SHMEM_TYPE_UINT64, 0, 0);
      } catch (const Error& e) {
        throw_error(MORI_SHMEM_ERR_CONFIG, "MORI_SHMEM_UCX_ATOMICS=ucx, but UCX cannot apply an atomic on PE ", pe,
                    " (", e.what(), "): in error mode PEER, UCX has no software-emulated atomics, so this needs "
                    "NIC atomics (verbs); use MORI_SHMEM_UCX_ATOMICS=am");
      }
    }
    const std::string lanes = transports(*peers_[pe]);
    detail += (detail.empty() ? "" : "; ") + ("PE " + std::to_string(pe) + ": " + lanes);
    size_t begin = 0;
    while (begin < lanes.size()) {
      const size_t end = std::min(lanes.find(',', begin), lanes.size());
      used.insert(lanes.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  bootstrap.barrier("remote: ucx connected");
  std::ostringstream uid;
  uid << "ucx:" << std::hex << identity.worker_uid;
  endpoint_ = uid.str();
  for (const std::string& lane : used) endpoint_ += (lane == *used.begin() ? " " : "+") + lane;
  if (endpoint_.size() > kEndpointChars) endpoint_.resize(kEndpointChars);
  log::emit(log::Level::Info, "PE ", rank_, ": remote transport: UCX ", api_.major, ".", api_.minor, ".",
            api_.release, " from ", api_.origin, ", atomics ", am_atomics_ ? "as active messages" : "by UCX",
            "; transports ", detail);
}

void UcxConduit::connect_peer(Peer& peer, const void* address, const void* rkey) {
  std::lock_guard<std::mutex> lock(mutex_);
  ucx::ucp_ep_params_t params{};
  params.field_mask = ucx::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | ucx::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      ucx::UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = static_cast<const ucx::ucp_address_t*>(address);
  params.err_mode = ucx::UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler = {&UcxConduit::on_endpoint_error, &peer};
  ucx::ucs_status_t status = api_.ucp_ep_create(worker_, &params, &peer.ep);
  if (status != ucx::UCS_OK) {
    peer.ep = nullptr;
    throw_error(MORI_SHMEM_ERR_PEER_LOST, "PE ", peer.pe, ": ucp_ep_create: ", ucx::describe(api_, status));
  }
  status = api_.ucp_ep_rkey_unpack(peer.ep, rkey, &peer.rkey);
  if (status != ucx::UCS_OK) {
    peer.rkey = nullptr;
    throw_error(MORI_SHMEM_ERR_PEER_LOST, "PE ", peer.pe, ": ucp_ep_rkey_unpack: ", ucx::describe(api_, status));
  }
}

// "tcp/lo,cma/memory": the transports UCX chose for the lanes of pe's endpoint.
std::string UcxConduit::transports(Peer& peer) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (peer.ep == nullptr) return "?";
  ucx::ucp_transport_entry_t entries[16] = {};
  ucx::ucp_ep_attr_t attr{};
  attr.field_mask = ucx::UCP_EP_ATTR_FIELD_TRANSPORTS;
  attr.transports.entries = entries;
  attr.transports.num_entries = 16;
  attr.transports.entry_size = sizeof(ucx::ucp_transport_entry_t);
  if (api_.ucp_ep_query(peer.ep, &attr) != ucx::UCS_OK) return "?";
  std::set<std::string> names;
  for (unsigned i = 0; i < std::min(attr.transports.num_entries, 16u); ++i) {
    const char* tl = entries[i].transport_name;
    const char* dev = entries[i].device_name;
    names.insert(std::string(tl != nullptr ? tl : "?") + "/" + (dev != nullptr ? dev : "?"));
  }
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ",") + name;
  return out;
}

void UcxConduit::close_all() noexcept {
  stopping_.store(true);
  if (stop_pipe_[1] >= 0) {
    const char byte = 1;
    (void)!write(stop_pipe_[1], &byte, 1);
  }
  if (progress_.joinable()) progress_.join();
  if (worker_ != nullptr) {
    // Endpoints close by force: a flushing close would wait on peers that may be gone; what they
    // still owed was completed by the quiet before finalize's barrier.
    std::vector<void*> closing;
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& peer : peers_) {
      if (peer && peer->ep != nullptr) retire(*peer, "the conduit closed");
      if (peer && peer->closing != nullptr) closing.push_back(peer->closing);
    }
    const Deadline deadline = Deadline::after(kCloseGraceS);
    for (void* request : closing) {
      while (api_.ucp_request_check_status(request) == ucx::UCS_INPROGRESS && !deadline.expired()) {
        api_.ucp_worker_progress(worker_);
      }
      api_.ucp_request_free(request);
    }
    for (auto& peer : peers_) {
      if (peer && peer->rkey != nullptr) api_.ucp_rkey_destroy(peer->rkey);
      if (peer) peer->rkey = nullptr;
    }
  }
  if (memh_ != nullptr) api_.ucp_mem_unmap(context_, memh_);
  memh_ = nullptr;
  if (worker_ != nullptr) api_.ucp_worker_destroy(worker_);
  worker_ = nullptr;
  if (context_ != nullptr) api_.ucp_cleanup(context_);
  context_ = nullptr;
  for (int& fd : stop_pipe_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

// ---- waiting and failure ------------------------------------------------------------------------

UcxConduit::Peer& UcxConduit::peer(int pe) {
  Peer* found = (pe >= 0 && size_t(pe) < peers_.size()) ? peers_[pe].get() : nullptr;
  if (found == nullptr) throw_error(MORI_SHMEM_ERR_INTERNAL, "PE ", pe, " is not reached by the remote transport");
  return *found;
}

void UcxConduit::on_endpoint_error(void* arg, ucx::ucp_ep_h, ucx::ucs_status_t status) {
  // Called from progress, mutex_ held. UCX has already failed the endpoint's outstanding requests;
  // the endpoint itself is closed by the next call that meets it (not from inside the callback).
  // Debug level: a peer that finalizes first resets its connections, and whoever really needed it
  // gets PEER_LOST with this reason.
  Peer& peer = *static_cast<Peer*>(arg);
  UcxConduit& self = *peer.owner;
  if (peer.lost.empty()) peer.lost = "UCX reported " + ucx::describe(self.api_, status);
  log::emit(log::Level::Debug, "PE ", self.rank_, ": remote transport to PE ", peer.pe, " failed: ", peer.lost);
}

ucx::ucp_ep_h UcxConduit::usable(Peer& peer, const char* what) {
  if (peer.lost.empty() && peer.ep != nullptr) return peer.ep;
  retire(peer, "its endpoint was closed");
  throw_error(MORI_SHMEM_ERR_PEER_LOST, "the remote transport to PE ", peer.pe, " failed earlier (", peer.lost,
              "); this PE cannot reach it any more (", what, ")");
}

void UcxConduit::retire(Peer& peer, const std::string& why) {
  if (peer.lost.empty()) peer.lost = why;
  if (peer.ep == nullptr) return;
  ucx::ucp_request_param_t param{};
  param.op_attr_mask = ucx::UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = ucx::UCP_EP_CLOSE_FLAG_FORCE;
  ucx::ucs_status_ptr_t request = api_.ucp_ep_close_nbx(peer.ep, &param);
  peer.ep = nullptr;
  if (ucx::ptr_is_request(request)) peer.closing = request;
}

void UcxConduit::progress_until(Peer& peer, const std::function<bool()>& done, const Deadline& deadline,
                                const char* what) {
  for (uint64_t round = 0;; ++round) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      api_.ucp_worker_progress(worker_);
      if (done()) return;
    }
    if (deadline.expired()) give_up(peer, nullptr, what);
    answer_back_off(round);
  }
}

void UcxConduit::finish(Peer& peer, ucx::ucs_status_ptr_t request, const Deadline& deadline, const char* what) {
  if (!ucx::ptr_is_request(request)) {
    const ucx::ucs_status_t status = ucx::ptr_status(request);
    if (status != ucx::UCS_OK) lost(peer, status, what);
    return;
  }
  ucx::ucs_status_t status = ucx::UCS_INPROGRESS;
  for (uint64_t round = 0; status == ucx::UCS_INPROGRESS; ++round) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      api_.ucp_worker_progress(worker_);
      status = api_.ucp_request_check_status(request);
      if (status != ucx::UCS_INPROGRESS) api_.ucp_request_free(request);
    }
    if (status == ucx::UCS_INPROGRESS && deadline.expired()) give_up(peer, request, what);
    answer_back_off(round);
  }
  if (status != ucx::UCS_OK) lost(peer, status, what);
}

void UcxConduit::give_up(Peer& peer, void* request, const char* what) {
  // Closing the endpoint by force cancels `request` (and whatever else is outstanding on it), so
  // UCX writes nothing more into the caller's memory once this returns.
  void* closing = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    retire(peer, std::string("no answer to ") + what + " within " + format_seconds(config_.timeout_s) + " s");
    closing = peer.closing;
  }
  const Deadline grace = Deadline::after(kCloseGraceS);
  bool settled = false;
  while (!settled && !grace.expired()) {
    std::lock_guard<std::mutex> lock(mutex_);
    api_.ucp_worker_progress(worker_);
    settled = (request == nullptr || api_.ucp_request_check_status(request) != ucx::UCS_INPROGRESS) &&
              (closing == nullptr || api_.ucp_request_check_status(closing) != ucx::UCS_INPROGRESS);
  }
  if (!settled) {
    log::emit(log::Level::Error, "PE ", rank_, ": UCX did not cancel ", what, " towards PE ", peer.pe, " within ",
              kCloseGraceS, " s of closing its endpoint");
  }
  if (request != nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    api_.ucp_request_free(request);
  }
  throw_error(MORI_SHMEM_ERR_TIMEOUT, "PE ", peer.pe, " did not complete ", what, " within ",
              format_seconds(config_.timeout_s), " s (MORI_SHMEM_WAIT_TIMEOUT); it may be dead or stuck, and this ",
              "PE no longer reaches it");
}

void UcxConduit::lost(Peer& peer, ucx::ucs_status_t status, const char* what) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    retire(peer, "UCX reported " + ucx::describe(api_, status));
    why = peer.lost;
  }
  throw_error(MORI_SHMEM_ERR_PEER_LOST, "the remote transport lost PE ", peer.pe, " during ", what, " (", why, ")");
}

}  // namespace mori::shmem::remote
