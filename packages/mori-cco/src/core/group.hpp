// SPDX-License-Identifier: MIT
// A communicator's own bootstrap network: a mori-shmem bootstrap group (rendezvous on the unique
// id, HMAC-checked peers, deadlines on every collective), wrapped so failures throw cco errors.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mori_shmem/mori_shmem.h"

namespace mori::cco {

// Throws the cco error matching a failed mori-shmem call's status, with its message.
void check_shmem(int status, const char* what);

class Group {
 public:
  Group(const mori_shmem_uniqueid_t& uid, int rank, int nranks, double timeout_s);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // 16 hex digits unique to the unique id: names the group's shared-memory segments.
  const std::string& tag() const { return tag_; }
  mori_shmem_bootstrap_group_t handle() const { return group_; }

  // All COLLECTIVE over the group.
  void allgather(const void* send, void* recv, size_t bytes_per_rank);
  void barrier();
  // received[r][i]: rank r's i-th fd, owned by the caller (empty for the caller's own rank).
  std::vector<std::vector<int>> exchange_fds(const std::vector<int>& fds);

  template <typename T>
  std::vector<T> allgather_value(const T& value) {
    std::vector<T> all(static_cast<size_t>(nranks_));
    allgather(&value, all.data(), sizeof(T));
    return all;
  }

 private:
  mori_shmem_bootstrap_group_t group_ = nullptr;
  int rank_;
  int nranks_;
  std::string tag_;
};

}  // namespace mori::cco
