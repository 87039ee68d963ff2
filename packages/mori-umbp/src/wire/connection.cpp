// SPDX-License-Identifier: MIT
#include "wire/connection.hpp"

#include <vector>

namespace mori::umbp::wire {

Connection::Connection(const std::string& host, uint16_t port, const std::string& node, std::string_view secret,
                       Deadline deadline)
    : fd_(connect_to(host, port, deadline)), reader_(fd_.get()) {
  if (node.size() > kMaxNodeIdBytes) throw NotAServer("node id too long");
  uint8_t hello[kMagicBytes + kNonceBytes];
  reader_.read(hello, sizeof(hello), deadline);
  if (std::memcmp(hello, kMagic, kMagicBytes) != 0) throw NotAServer("not a mori-umbp wire server");
  const uint8_t* s_nonce = hello + kMagicBytes;

  uint8_t c_nonce[kNonceBytes];
  if (::mori::common::fill_random(c_nonce, sizeof(c_nonce)) != 0) throw SocketError("getrandom failed");
  const Digest tag = handshake_mac(secret, "client", s_nonce, c_nonce, node);
  const uint8_t node_len[2] = {uint8_t(node.size()), uint8_t(node.size() >> 8)};
  iovec pieces[5] = {{const_cast<char*>(kMagic), kMagicBytes},
                     {c_nonce, sizeof(c_nonce)},
                     {const_cast<uint8_t*>(node_len), sizeof(node_len)},
                     {const_cast<char*>(node.data()), node.size()},
                     {const_cast<uint8_t*>(tag.data()), tag.size()}};
  write_all(fd_.get(), pieces, 5, deadline);

  uint8_t verdict = 0;
  reader_.read(&verdict, 1, deadline);
  if (verdict != kOk) throw Unauthenticated("the server refused the pool credential");
  uint8_t proof[kTagBytes];
  reader_.read(proof, sizeof(proof), deadline);
  const Digest expected = handshake_mac(secret, "server", s_nonce, c_nonce, node);
  if (!::mori::common::constant_time_equal(proof, expected.data(), kTagBytes)) {
    throw Unauthenticated("the server does not prove the pool secret");
  }
  keys_ = frame_keys(secret, s_nonce, c_nonce, node);
}

void Connection::send(std::string_view name, std::string_view body, Deadline deadline) {
  uint8_t header[kHeaderBytes];
  pack(Header{uint32_t(body.size()), seq_, uint8_t(name.size())}, header);
  const Digest tag = keys_.c2s.over({{header, sizeof(header)}, {name.data(), name.size()}, {body.data(), body.size()}});
  iovec pieces[4] = {{header, sizeof(header)},
                     {const_cast<char*>(name.data()), name.size()},
                     {const_cast<char*>(body.data()), body.size()},
                     {const_cast<uint8_t*>(tag.data()), tag.size()}};
  write_all(fd_.get(), pieces, 4, deadline);
}

std::pair<uint8_t, std::string> Connection::receive(Deadline deadline) {
  uint8_t header[kHeaderBytes];
  reader_.read(header, sizeof(header), deadline);
  const Header answer = unpack(header);
  if (answer.size > kMaxFrameBytes || answer.seq != seq_) throw Closed("the server broke the protocol");
  std::string body(answer.size, '\0');
  uint8_t tag[kTagBytes];
  reader_.read(body.data(), body.size(), deadline);
  reader_.read(tag, sizeof(tag), deadline);
  const Digest expected = keys_.s2c.over({{header, sizeof(header)}, {body.data(), body.size()}});
  if (!::mori::common::constant_time_equal(tag, expected.data(), kTagBytes)) throw Closed("an answer failed its MAC");
  ++seq_;
  return {answer.last, std::move(body)};
}

}  // namespace mori::umbp::wire
