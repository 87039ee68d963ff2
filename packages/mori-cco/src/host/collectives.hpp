// SPDX-License-Identifier: MIT
// The cpu backend of the collectives: collective_args.h's protocol run by the calling thread.
#pragma once

#include "collective_args.h"

namespace mori::cco::host {

// Runs one collective call; throws ccoTimeout when a peer does not arrive in time.
void run_collective(const mori_cco_collective_args_t& args);

}  // namespace mori::cco::host
