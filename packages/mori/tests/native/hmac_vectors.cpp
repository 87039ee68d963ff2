// SPDX-License-Identifier: MIT
// Run by test_shared_headers.py: for each stdin line "<key hex> <message hex>" ("-" for empty),
// prints "<sha256(message) hex> <hmac_sha256(key, message) hex> <equal to itself> <equal with one
// bit flipped>", for the test to compare with Python's hashlib and hmac.
#include <cstdio>
#include <iostream>
#include <mori/hmac_sha256.hpp>
#include <string>
#include <vector>

namespace {

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> bytes;
  if (hex == "-") return bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes.push_back(uint8_t(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return bytes;
}

std::string to_hex(const mori::common::Sha256Digest& digest) {
  std::string hex;
  char byte[3];
  for (uint8_t b : digest) {
    std::snprintf(byte, sizeof(byte), "%02x", b);
    hex += byte;
  }
  return hex;
}

}  // namespace

int main() {
  std::string key_hex, msg_hex;
  while (std::cin >> key_hex >> msg_hex) {
    const std::vector<uint8_t> key = from_hex(key_hex), msg = from_hex(msg_hex);
    const auto digest = mori::common::sha256(msg.data(), msg.size());
    const auto mac = mori::common::hmac_sha256(key.data(), key.size(), msg.data(), msg.size());
    auto flipped = mac;
    flipped[31] ^= 1;
    std::cout << to_hex(digest) << ' ' << to_hex(mac) << ' '
              << mori::common::constant_time_equal(mac.data(), mac.data(), mac.size()) << ' '
              << mori::common::constant_time_equal(mac.data(), flipped.data(), mac.size()) << '\n';
  }
  uint8_t random[64] = {};
  return mori::common::fill_random(random, sizeof(random));
}
