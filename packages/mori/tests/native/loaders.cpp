// SPDX-License-Identifier: MIT
// Run by test_shared_headers.py against the libraries this machine really has:
//   loaders cuda      -> "loaded <devices>" or "unavailable: <why>", then describe(CUDA_ERROR_OUT_OF_MEMORY)
//   loaders ucx DIR   -> "loaded <major>.<minor> <origin>" or "unavailable: <why>" (DIR "-": the system's),
//                        then what a second load() with another directory returns
#include <iostream>
#include <mori/cuda_driver.hpp>
#include <mori/ucx_api.hpp>
#include <string>

namespace {

int cuda() {
  namespace cuda = mori::common::cuda;
  try {
    const cuda::Driver& d = cuda::driver();
    int count = 0;
    d.cuDeviceGetCount(&count);
    std::cout << "loaded " << count << '\n';
  } catch (const cuda::Unavailable& e) {
    std::cout << "unavailable: " << e.what() << '\n';
  }
  std::cout << cuda::describe(cuda::kErrorOutOfMemory) << '\n';
  return 0;
}

int ucx(const std::string& dir) {
  namespace ucx = mori::common::ucx;
  try {
    bool opened = false;
    const ucx::Api& api = ucx::load(dir, &opened);
    std::cout << "loaded " << api.major << "." << api.minor << " " << api.origin << " opened=" << opened << '\n';
    // A pointer, not a reference: GCC 13's -Wdangling-reference takes the string temporary for the referent.
    const ucx::Api* again = &ucx::load(std::string("/elsewhere"), &opened);
    std::cout << "again " << (again == &api) << " opened=" << opened << " dir=" << again->dir << '\n';
    std::cout << ucx::describe(api, ucx::UCS_ERR_CONNECTION_RESET) << '\n';
  } catch (const ucx::Unavailable& e) {
    std::cout << "unavailable: " << e.what() << '\n';
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "cuda") return cuda();
  if (what == "ucx" && argc > 2) return ucx(argv[2] == std::string("-") ? "" : argv[2]);
  std::cerr << "usage: loaders cuda | loaders ucx DIR\n";
  return 2;
}
