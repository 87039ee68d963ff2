// SPDX-License-Identifier: MIT
#include "core/topology.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/settings.hpp"

namespace mori::cco {

namespace {

using Name = std::array<char, 64>;

// How one rank asks to be grouped (allgathered, so every rank decides the same).
struct TeamRequest {
  int32_t source = 0;  // 0: by host, 1: MORI_VPOD_ID, 2: MORI_CCO_FABRIC_CROSSNODE_LSA
  int32_t disabled = 0;  // MORI_CCO_FABRIC_DISABLE overrode a request of this rank
  int64_t team = 0;    // the team id of a manual request
};

constexpr const char* kSourceNames[] = {"host grouping", "MORI_VPOD_ID", "MORI_CCO_FABRIC_CROSSNODE_LSA"};

TeamRequest my_request() {
  TeamRequest request;
  const auto vpod = settings::get_optional_int("MORI_VPOD_ID");
  const bool whole_world = settings::get_int("MORI_CCO_FABRIC_CROSSNODE_LSA") != 0;
  if (settings::get_int("MORI_CCO_FABRIC_DISABLE") != 0) {
    request.disabled = vpod.has_value() || whole_world;
    return request;
  }
  if (vpod) {
    request.source = 1;
    request.team = *vpod;
  } else if (whole_world) {
    request.source = 2;
  }
  return request;
}

// "0, 1, 5" (at most eight, then how many more).
std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) text += " and " + std::to_string(ranks.size() - 8) + " more";
  return text;
}

// The settings that made the manual teams, as every rank names them in an error.
std::string manual_sources(const std::vector<TeamRequest>& requests) {
  bool used[3] = {false, false, false};
  for (const TeamRequest& request : requests) used[request.source] = true;
  if (used[1] && used[2]) return "MORI_VPOD_ID / MORI_CCO_FABRIC_CROSSNODE_LSA";
  return used[1] ? kSourceNames[1] : kSourceNames[2];
}

// Each rank's team index: a new team starts where the key changes; a key seen before is a team
// that is not a contiguous block.
template <typename Key>
std::vector<int> contiguous_teams(const std::vector<Key>& keys, const std::string& what) {
  std::vector<int> team_of(keys.size());
  int teams = 0;
  for (size_t r = 0; r < keys.size(); ++r) {
    if (r > 0 && !(keys[r] == keys[r - 1])) ++teams;
    team_of[r] = teams;
    for (size_t q = 0; q + 1 < r; ++q) {
      if (keys[q] == keys[r] && team_of[q] != team_of[r]) {
        fail(ccoInvalidArgument, what, ": ranks ", q, " and ", r, " are in one LSA team but ranks between them "
             "are not; a team must be a contiguous block of ranks");
      }
    }
  }
  return team_of;
}

Topology from_teams(const std::vector<int>& team_of, int rank, const std::string& what) {
  Topology topology;
  const int nranks = static_cast<int>(team_of.size());
  topology.num_nodes = team_of.back() + 1;
  topology.node = team_of[rank];
  topology.node_start = static_cast<int>(std::find(team_of.begin(), team_of.end(), topology.node) - team_of.begin());
  topology.lsa_size = static_cast<int>(std::count(team_of.begin(), team_of.end(), topology.node));
  topology.lsa_rank = rank - topology.node_start;
  const int first_size = static_cast<int>(std::count(team_of.begin(), team_of.end(), 0));
  if (first_size * topology.num_nodes != nranks) {
    fail(ccoInvalidArgument, what, ": the first LSA team has ", first_size, " of the ", nranks, " ranks over ",
         topology.num_nodes, " teams; every team needs the same number of ranks");
  }
  return topology;
}

Topology manual_teams(const std::vector<TeamRequest>& requests, const std::vector<Name>& machines, int rank) {
  const std::string what = manual_sources(requests);
  std::vector<int64_t> keys;
  for (const TeamRequest& request : requests) keys.push_back(request.team);
  const std::vector<int> team_of = contiguous_teams(keys, what);
  for (size_t r = 1; r < team_of.size(); ++r) {
    if (team_of[r] == team_of[r - 1] && machines[r] != machines[r - 1]) {
      fail(ccoUnsupported, what, " puts ranks ", r - 1, " and ", r, " in one LSA team, but rank ", r - 1,
           " runs on host ", machines[r - 1].data(), " and rank ", r, " on host ", machines[r].data(),
           ": mori-cco maps a peer's slot only within one machine (it drives no scale-up fabric such as UALink "
           "or multi-node NVLink); give each machine its own team, or set MORI_CCO_FABRIC_DISABLE=1");
    }
  }
  return from_teams(team_of, rank, what);
}

// This rank's host for the host grouping: its machine, or "node <rank / N>" under
// MORI_CCO_RANKS_PER_NODE=N (one host standing for several).
Name my_host(const Name& machine, int rank) {
  const int64_t per_node = settings::get_int("MORI_CCO_RANKS_PER_NODE");
  if (per_node <= 0) return machine;
  Name host{};
  std::snprintf(host.data(), host.size(), "node %lld", static_cast<long long>(rank / per_node));
  return host;
}

// What every rank says about itself; a setting that does not parse is reported after the exchange
// so that every rank fails (its own message on that rank), none waits for it.
struct Placement {
  Name machine{};
  Name host{};
  TeamRequest request;
  int32_t settings_ok = 1;
};

}  // namespace

Topology discover_topology(Group& group) {
  Placement mine;
  gethostname(mine.machine.data(), mine.machine.size() - 1);
  std::string problem;
  try {
    mine.host = my_host(mine.machine, group.rank());
    mine.request = my_request();
  } catch (const Error& error) {
    mine.settings_ok = 0;
    problem = error.what();
  }
  const auto all = group.allgather_value(mine);
  std::vector<Name> machines, hosts;
  std::vector<TeamRequest> requests;
  for (int r = 0; r < group.nranks(); ++r) {
    if (!all[r].settings_ok) {
      if (!problem.empty()) fail(ccoInvalidArgument, problem);
      fail(ccoInvalidArgument, "rank ", r, "'s grouping settings (MORI_CCO_RANKS_PER_NODE, MORI_VPOD_ID, "
           "MORI_CCO_FABRIC_*) do not parse; its error names the value");
    }
    machines.push_back(all[r].machine);
    hosts.push_back(all[r].host);
    requests.push_back(all[r].request);
  }

  std::vector<int> manual;
  std::vector<int> by_host;
  for (int r = 0; r < group.nranks(); ++r) (requests[r].source != 0 ? manual : by_host).push_back(r);
  if (!manual.empty() && !by_host.empty()) {
    std::vector<int> disabled;
    for (int r : by_host) {
      if (requests[r].disabled) disabled.push_back(r);
    }
    fail(ccoInvalidArgument, manual_sources(requests), " asks for manual LSA teams on ranks ", rank_list(manual),
         " but ranks ", rank_list(by_host), " group by host",
         disabled.empty() ? std::string() : " (MORI_CCO_FABRIC_DISABLE on ranks " + rank_list(disabled) + ")",
         "; manual grouping is all ranks or none");
  }
  Topology topology;
  if (manual.empty()) {
    topology = from_teams(contiguous_teams(hosts, "ranks grouped by host"), group.rank(), "ranks grouped by host");
  } else {
    topology = manual_teams(requests, machines, group.rank());
  }
  topology.host_ranks = static_cast<int>(std::count(machines.begin(), machines.end(), mine.machine));
  return topology;
}

}  // namespace mori::cco
