// SPDX-License-Identifier: MIT
// Where a communicator's ranks sit: which of them form this rank's LSA team (the ranks that map
// each other's slots and reach each other by load/store) and how many teams there are. Teams are
// MORI's: by host by default, or set by MORI_VPOD_ID / MORI_CCO_FABRIC_CROSSNODE_LSA.
#pragma once

#include "core/group.hpp"

namespace mori::cco {

struct Topology {
  int node = 0;        // index of this rank's LSA team
  int num_nodes = 1;   // LSA teams in the world
  int lsa_rank = 0;
  int lsa_size = 1;
  int node_start = 0;  // world rank of LSA rank 0
  int host_ranks = 1;  // ranks on this machine (more than lsa_size when one host stands for several)

  // Whether world rank `rank` is on this rank's node (reachable by load/store).
  bool on_node(int rank) const { return rank >= node_start && rank < node_start + lsa_size; }
};

// COLLECTIVE over the world group. Teams are, by precedence (MORI's):
//   MORI_CCO_FABRIC_DISABLE (not 0)  this rank groups by host, whatever else is set;
//   MORI_VPOD_ID=<id>                ranks with the same id form a team (every rank or none sets it);
//   MORI_CCO_FABRIC_CROSSNODE_LSA    the whole world is one team;
//   otherwise                        ranks of one host (host name, or MORI_CCO_RANKS_PER_NODE).
// MORI's automatic UALink fabric detection has no counterpart here (no scale-up fabric is
// supported), so the last step is reached instead. Every team must be a contiguous block of ranks,
// all teams of one size, and each team on one machine (a slot is mapped only within one): a
// grouping that breaks this throws on every rank (ccoInvalidArgument, ccoUnsupported for a team
// across machines), naming the setting and the ranks.
Topology discover_topology(Group& group);

}  // namespace mori::cco
