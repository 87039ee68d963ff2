// SPDX-License-Identifier: MIT
// Process-global record of the unique ids made by create_unique_id in this process. The port is
// only probed, not held (see NOTE [unique id port] in unique_id.cpp), so the record exists to tell
// rank 0 whether "the port is taken" means "someone grabbed it since this process made the id".
#pragma once

#include <cstdint>

#include "bootstrap/bootstrap.hpp"

namespace mori::shmem {

void remember_unique_id(uint16_t port, const Secret& secret);
bool unique_id_made_here(uint16_t port, const Secret& secret);

}  // namespace mori::shmem
