// SPDX-License-Identifier: MIT
// Teams: subsets of the world with an arithmetic rank map, world_rank = base + team_rank * stride
// (mori_cco_team_t). The ranks of a node are contiguous and every node holds lsa_size of them, so
// the LSA team is a contiguous run and the cross-node and rail teams (one rank per node, the one
// with this rank's lsa_rank) are strided by lsa_size.
#pragma once

#include "../dev_comm.h"

namespace mori::cco::device {

__device__ __forceinline__ mori_cco_team_t make_team(int nranks, int rank, int stride, int base) {
  mori_cco_team_t t;
  t.nranks = nranks;
  t.rank = rank;
  t.stride = stride;
  t.base = base;
  return t;
}

__device__ __forceinline__ mori_cco_team_t team_world(const mori_cco_dev_comm_t& comm) {
  return make_team(comm.world_size, comm.rank, 1, 0);
}

__device__ __forceinline__ mori_cco_team_t team_lsa(const mori_cco_dev_comm_t& comm) {
  return make_team(comm.lsa_size, comm.lsa_rank, 1, comm.node_start);
}

// MORI's cross-node team: this rank's counterpart (same lsa_rank) on every node.
__device__ __forceinline__ mori_cco_team_t team_cross_node(const mori_cco_dev_comm_t& comm) {
  return make_team(comm.num_nodes, comm.node, comm.lsa_size, comm.lsa_rank);
}

// The rail: the ranks that share this rank's lsa_rank (and so, usually, its NIC rail). Same map as
// the cross-node team; kept apart because MORI's API names both.
__device__ __forceinline__ mori_cco_team_t team_rail(const mori_cco_dev_comm_t& comm) {
  return team_cross_node(comm);
}

__device__ __forceinline__ int team_rank_to_world(const mori_cco_team_t& team, int team_rank) {
  return team.base + team_rank * team.stride;
}

// The world rank's index in the LSA team, or -1 when it is on another node.
__device__ __forceinline__ int lsa_rank_of_world(const mori_cco_dev_comm_t& comm, int world_rank) {
  const int r = world_rank - comm.node_start;
  return r >= 0 && r < comm.lsa_size ? r : -1;
}

// The LSA rank of a team member, or -1 when that member is on another node.
__device__ __forceinline__ int team_rank_to_lsa(const mori_cco_dev_comm_t& comm, const mori_cco_team_t& team,
                                                int team_rank) {
  return lsa_rank_of_world(comm, team_rank_to_world(team, team_rank));
}

}  // namespace mori::cco::device
