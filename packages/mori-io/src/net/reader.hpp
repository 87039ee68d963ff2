// SPDX-License-Identifier: MIT
// NOTE [buffered frame reads]
// A frame's fixed header is followed by a variable part (a request's segment table, a response's
// message, a small payload) whose length only the header tells. Reading the header and then each
// part with its own recvmsg costs a system call per part, and on the small-transfer path those
// calls are much of the time (a 4 KiB read was two receives on the initiator and three on the
// target). A StreamReader receives whatever the socket holds, up to a small buffer, in one call;
// the frame's parts are then taken from the buffer, and only what did not fit is received straight
// into its destination. Bytes past the frame (the next frame's start) stay buffered for the next
// read, so whoever reads the socket must read through its reader, and must not wait for the
// socket to become readable while the reader still holds bytes (buffered() > 0).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "net/socket.hpp"

namespace mori::io::net {

class StreamReader {
 public:
  // Enough for a frame header, a short segment table or message and a 4 KiB payload: a larger
  // buffer would trade each saved receive for a copy of the same bytes.
  static constexpr size_t kDefaultCapacity = 4096 + 256;

  explicit StreamReader(const Socket& socket, size_t capacity = kDefaultCapacity);

  size_t buffered() const { return end_ - begin_; }

  // Receives what the socket holds now, without waiting; false when it held nothing (and nothing
  // is buffered). Throws Error(Connection) on EOF or a socket error.
  bool try_fill();

  // Reads exactly n bytes (or every byte of the iovecs, advanced in place): buffered bytes first,
  // then from the socket, by the deadline and unless stop becomes true, with the errors of
  // net::recv_iov.
  void read(void* data, size_t n, Deadline deadline, const std::atomic<bool>* stop);
  void read_iov(iovec* iov, size_t count, Deadline deadline, const std::atomic<bool>* stop);

  // With nothing buffered: receives, without waiting and in one call, into `head` (head_len bytes)
  // and then into the iovecs; returns how many bytes came (0: none were there). For a caller that
  // knows where the next frame's payload belongs (NOTE [read responses in place]).
  size_t try_receive_split(uint8_t* head, size_t head_len, const iovec* tail, size_t count);
  // Puts bytes back in front of whatever is buffered: the reads that follow return them first.
  void unread(const uint8_t* data, size_t n);

 private:
  // Copies up to n buffered bytes to out; returns how many.
  size_t take(uint8_t* out, size_t n);

  const Socket& socket_;
  // Whether the last read had to wait for the socket: a request/response stream that did will
  // likely wait again, so the next read polls first instead of paying a receive that finds
  // nothing; a stream that keeps data queued goes straight to the receive.
  bool expect_wait_ = false;
  size_t capacity_;
  std::vector<uint8_t> buffer_;  // grows past capacity_ only to hold unread bytes
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace mori::io::net
