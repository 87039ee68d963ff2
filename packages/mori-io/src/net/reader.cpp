// SPDX-License-Identifier: MIT
#include "net/reader.hpp"

#include <limits.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace mori::io::net {

StreamReader::StreamReader(const Socket& socket, size_t capacity)
    : socket_(socket), capacity_(capacity), buffer_(capacity) {}

size_t StreamReader::take(uint8_t* out, size_t n) {
  const size_t k = std::min(n, buffered());
  std::memcpy(out, buffer_.data() + begin_, k);
  begin_ += k;
  if (begin_ == end_) {
    begin_ = end_ = 0;
    if (buffer_.size() > capacity_) {
      buffer_.resize(capacity_);
      buffer_.shrink_to_fit();
    }
  }
  return k;
}

bool StreamReader::try_fill() {
  if (buffered() > 0) return true;
  for (;;) {
    ssize_t got = ::recv(socket_.fd(), buffer_.data(), capacity_, MSG_DONTWAIT);
    if (got > 0) {
      begin_ = 0;
      end_ = size_t(got);
      return true;
    }
    if (got == 0) throw Error(Code::Connection, "the peer closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    if (errno != EINTR) throw Error(Code::Connection, std::string("receive failed: ") + std::strerror(errno));
  }
}

void StreamReader::read(void* data, size_t n, Deadline deadline, const std::atomic<bool>* stop) {
  auto* out = static_cast<uint8_t*>(data);
  size_t done = take(out, n);
  // A short rest is received through the buffer, so the bytes behind it (the frame's next part)
  // come in the same call; a long one goes straight to its destination.
  bool waited = false;
  const bool receives = n - done > 0 && n - done < capacity_;
  while (n - done > 0 && n - done < capacity_) {
    if (expect_wait_ && !waited) {
      wait_ready(socket_, POLLIN, deadline, stop);
      waited = true;
    }
    if (!try_fill()) {
      wait_ready(socket_, POLLIN, deadline, stop);
      waited = true;
      continue;
    }
    done += take(out + done, n - done);
  }
  if (receives) expect_wait_ = waited;
  if (n > done) recv_all(socket_, out + done, n - done, deadline, stop);
}

void StreamReader::read_iov(iovec* iov, size_t count, Deadline deadline, const std::atomic<bool>* stop) {
  size_t i = 0;
  for (; i < count && buffered() > 0; ++i) {
    const size_t k = take(static_cast<uint8_t*>(iov[i].iov_base), iov[i].iov_len);
    iov[i].iov_base = static_cast<uint8_t*>(iov[i].iov_base) + k;
    iov[i].iov_len -= k;
    if (iov[i].iov_len > 0) break;  // the buffer ran dry inside this iovec
  }
  if (i < count) recv_iov(socket_, iov + i, count - i, deadline, stop);
}

size_t StreamReader::try_receive_split(uint8_t* head, size_t head_len, const iovec* tail, size_t count) {
  if (buffered() > 0) throw Error(Code::Internal, "a split receive with bytes still buffered");
  thread_local std::vector<iovec> iov;
  iov.assign(1, iovec{head, head_len});
  iov.insert(iov.end(), tail, tail + std::min<size_t>(count, IOV_MAX - 1));
  for (;;) {
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = iov.size();
    ssize_t got = ::recvmsg(socket_.fd(), &msg, MSG_DONTWAIT);
    if (got > 0) return size_t(got);
    if (got == 0) throw Error(Code::Connection, "the peer closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno != EINTR) throw Error(Code::Connection, std::string("receive failed: ") + std::strerror(errno));
  }
}

void StreamReader::unread(const uint8_t* data, size_t n) {
  if (n == 0) return;
  if (begin_ >= n) {
    begin_ -= n;
  } else {
    std::vector<uint8_t> joined(std::max(capacity_, n + buffered()));
    std::memcpy(joined.data(), data, n);
    std::memcpy(joined.data() + n, buffer_.data() + begin_, buffered());
    end_ = n + buffered();
    begin_ = 0;
    buffer_.swap(joined);
    return;
  }
  std::memcpy(buffer_.data() + begin_, data, n);
}

}  // namespace mori::io::net
