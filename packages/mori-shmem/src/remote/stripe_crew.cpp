// SPDX-License-Identifier: MIT
#include "remote/stripe_crew.hpp"

#include "core/error.hpp"

namespace mori::shmem::remote {

StripeCrew::StripeCrew(size_t helpers) {
  threads_.reserve(helpers);
  for (size_t i = 0; i < helpers; ++i) threads_.emplace_back([this, i] { serve(i); });
}

StripeCrew::~StripeCrew() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void StripeCrew::run(size_t parts, const std::function<void(size_t)>& part) {
  if (parts <= 1) {
    part(0);
    return;
  }
  if (parts > threads_.size() + 1) {
    throw_error(MORI_SHMEM_ERR_INTERNAL, "a striped transfer of ", parts, " parts needs more than the ",
                threads_.size(), " helper threads");
  }
  std::lock_guard<std::mutex> turn(turn_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    part_ = &part;
    parts_ = parts;
    errors_.assign(parts, nullptr);
    busy_ = threads_.size();
    ++round_;
  }
  wake_.notify_all();
  try {
    part(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [this] { return busy_ == 0; });
  for (auto& error : errors_) {
    if (error) std::rethrow_exception(error);
  }
}

void StripeCrew::serve(size_t helper) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || round_ != seen; });
    if (stopping_) return;
    seen = round_;
    const size_t index = helper + 1;
    if (index < parts_) {
      lock.unlock();
      try {
        (*part_)(index);
      } catch (...) {
        errors_[index] = std::current_exception();  // read by run() only after the round ends
      }
      lock.lock();
    }
    if (--busy_ == 0) finished_.notify_one();
  }
}

}  // namespace mori::shmem::remote
