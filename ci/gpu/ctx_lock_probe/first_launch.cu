// SPDX-License-Identifier: MIT
// A kernel in a module of its own: under CUDA_MODULE_LOADING=LAZY its first launch loads the module
// while holding the context's lock and waits for the GPU to drain (see ctx_lock_probe.cu).
extern "C" __global__ void first_launch() {}
void launch_first_time() { first_launch<<<1, 1>>>(); }
