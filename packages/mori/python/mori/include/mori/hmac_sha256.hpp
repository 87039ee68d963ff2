// SPDX-License-Identifier: MIT
// The few cryptographic primitives the packages' handshakes need to let peers prove they hold the
// job secret: SHA-256, HMAC-SHA-256, a constant-time compare and the kernel CSPRNG. Self-contained
// so that no package pulls in OpenSSL (ABI and licensing churn) for one MAC per connection.
//
// Header-only: inline functions in a hidden-visibility namespace, so each shared library that
// includes this keeps its own copy. packages/mori/tests/test_shared_headers.py checks it against
// Python's hashlib and hmac.
#pragma once

#include <sys/random.h>

#if defined(__x86_64__) && !defined(MORI_SHA256_PORTABLE)
#include <cpuid.h>
#include <immintrin.h>
#define MORI_SHA256_SHA_NI 1
#endif

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mori {
namespace common __attribute__((visibility("hidden"))) {

using Sha256Digest = std::array<uint8_t, 32>;

inline constexpr uint32_t kSha256RoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#ifdef MORI_SHA256_SHA_NI
// The x86 SHA extensions: a frame's MAC (mori-umbp's wire MACs every request and answer, 16 KiB
// and more for an inline put) costs ~8x less than the portable rounds. state0 holds (A,B,E,F),
// state1 (C,D,G,H), the layout sha256rnds2 works on.
__attribute__((target("sha,sse4.1,ssse3"))) inline void sha256_blocks_sha_ni(uint32_t state[8], const uint8_t* data,
                                                                              size_t blocks) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i cdab = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[0])), 0xB1);
  __m128i efgh = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[4])), 0x1B);
  __m128i state0 = _mm_alignr_epi8(cdab, efgh, 8);
  __m128i state1 = _mm_blend_epi16(efgh, cdab, 0xF0);
  for (; blocks > 0; --blocks, data += 64) {
    const __m128i saved0 = state0, saved1 = state1;
    __m128i w[4];  // the last four groups of four schedule words, group i in w[i % 4]
    for (int i = 0; i < 16; ++i) {
      if (i < 4) {
        w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * i)), byte_swap);
      } else {
        const __m128i next = _mm_add_epi32(_mm_sha256msg1_epu32(w[i & 3], w[(i + 1) & 3]),
                                           _mm_alignr_epi8(w[(i + 3) & 3], w[(i + 2) & 3], 4));
        w[i & 3] = _mm_sha256msg2_epu32(next, w[(i + 3) & 3]);
      }
      __m128i msg =
          _mm_add_epi32(w[i & 3], _mm_loadu_si128(reinterpret_cast<const __m128i*>(&kSha256RoundConstants[4 * i])));
      state1 = _mm_sha256rnds2_epu32(state1, state0, msg);
      msg = _mm_shuffle_epi32(msg, 0x0E);
      state0 = _mm_sha256rnds2_epu32(state0, state1, msg);
    }
    state0 = _mm_add_epi32(state0, saved0);
    state1 = _mm_add_epi32(state1, saved1);
  }
  const __m128i feba = _mm_shuffle_epi32(state0, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(state1, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[0]), _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[4]), _mm_alignr_epi8(dchg, feba, 8));
}

// SHA, SSE4.1 and SSSE3, asked of the CPU once.
inline bool cpu_has_sha_ni() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_SSE4_1) == 0 || (c & bit_SSSE3) == 0) return false;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    return (b & (1u << 29)) != 0;
  }();
  return has;
}
#endif

// FIPS 180-4 SHA-256, fed incrementally so HMAC can hash key pad and message without a copy.
class Sha256 {
 public:
  static constexpr size_t kBlockBytes = 64;

  void update(const uint8_t* data, size_t len) {
    total_bytes_ += len;
    while (len > 0) {
      if (buffered_ == 0 && len >= kBlockBytes) {  // whole blocks straight from the input
        const size_t blocks = len / kBlockBytes;
        compress(data, blocks);
        data += blocks * kBlockBytes;
        len -= blocks * kBlockBytes;
        continue;
      }
      const size_t take = std::min(len, kBlockBytes - buffered_);
      std::memcpy(buffer_ + buffered_, data, take);
      buffered_ += take;
      data += take;
      len -= take;
      if (buffered_ == kBlockBytes) {
        compress(buffer_, 1);
        buffered_ = 0;
      }
    }
  }

  Sha256Digest finish() {
    const uint64_t bit_length = total_bytes_ * 8;
    const uint8_t pad_start = 0x80;
    update(&pad_start, 1);
    const uint8_t zero = 0;
    while (buffered_ != kBlockBytes - 8) update(&zero, 1);
    uint8_t length_be[8];
    for (int i = 0; i < 8; ++i) length_be[i] = uint8_t(bit_length >> (56 - 8 * i));
    update(length_be, 8);
    Sha256Digest digest;
    for (int i = 0; i < 8; ++i) {
      digest[4 * i] = uint8_t(state_[i] >> 24);
      digest[4 * i + 1] = uint8_t(state_[i] >> 16);
      digest[4 * i + 2] = uint8_t(state_[i] >> 8);
      digest[4 * i + 3] = uint8_t(state_[i]);
    }
    return digest;
  }

 private:
  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  void compress(const uint8_t* blocks, size_t count) {
#ifdef MORI_SHA256_SHA_NI
    if (cpu_has_sha_ni()) {
      sha256_blocks_sha_ni(state_, blocks, count);
      return;
    }
#endif
    for (size_t i = 0; i < count; ++i) compress_portable(blocks + i * kBlockBytes);
  }

  void compress_portable(const uint8_t block[kBlockBytes]) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (uint32_t(block[4 * i]) << 24) | (uint32_t(block[4 * i + 1]) << 16) |
             (uint32_t(block[4 * i + 2]) << 8) | uint32_t(block[4 * i + 3]);
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 =
          h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kSha256RoundConstants[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state_[0] += a;
    state_[1] += b;
    state_[2] += c;
    state_[3] += d;
    state_[4] += e;
    state_[5] += f;
    state_[6] += g;
    state_[7] += h;
  }

  uint32_t state_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t buffer_[kBlockBytes] = {};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

inline Sha256Digest sha256(const uint8_t* data, size_t len) {
  Sha256 hasher;
  hasher.update(data, len);
  return hasher.finish();
}

// RFC 2104 HMAC over SHA-256, keyed once: each message starts from copies of the padded key's two
// hash states (what Python's hmac.copy() does), so a MAC costs its message and two final blocks.
class HmacSha256 {
 public:
  HmacSha256(const uint8_t* key, size_t key_len) {
    constexpr size_t kBlock = Sha256::kBlockBytes;
    uint8_t block_key[kBlock] = {};
    if (key_len > kBlock) {
      const Sha256Digest hashed = sha256(key, key_len);
      std::memcpy(block_key, hashed.data(), hashed.size());
    } else if (key_len > 0) {
      std::memcpy(block_key, key, key_len);
    }
    uint8_t pad[kBlock];
    for (size_t i = 0; i < kBlock; ++i) pad[i] = block_key[i] ^ 0x36;
    inner_.update(pad, kBlock);
    for (size_t i = 0; i < kBlock; ++i) pad[i] = block_key[i] ^ 0x5c;
    outer_.update(pad, kBlock);
  }

  // A message's hash to update(), in as many parts as it comes in; then finish() it.
  Sha256 begin() const { return inner_; }
  Sha256Digest finish(Sha256 message) const {
    const Sha256Digest inner_digest = message.finish();
    Sha256 outer = outer_;
    outer.update(inner_digest.data(), inner_digest.size());
    return outer.finish();
  }
  Sha256Digest mac(const uint8_t* msg, size_t len) const {
    Sha256 message = begin();
    message.update(msg, len);
    return finish(message);
  }

 private:
  Sha256 inner_;
  Sha256 outer_;
};

inline Sha256Digest hmac_sha256(const uint8_t* key, size_t key_len, const uint8_t* msg, size_t len) {
  return HmacSha256(key, key_len).mac(msg, len);
}

// Compares without an early exit, so the time taken does not reveal how many leading bytes of a
// forged MAC were right.
inline bool constant_time_equal(const uint8_t* a, const uint8_t* b, size_t len) {
  // volatile keeps the compiler from turning the accumulation back into an early-exit memcmp.
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < len; ++i) diff = diff | uint8_t(a[i] ^ b[i]);
  return diff == 0;
}

// Fills out with bytes from the kernel CSPRNG (getrandom(2)). Returns 0, or the errno that made
// it fail (the caller raises its own error).
inline int fill_random(uint8_t* out, size_t len) {
  size_t filled = 0;
  while (filled < len) {
    const ssize_t got = getrandom(out + filled, len - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    filled += size_t(got);
  }
  return 0;
}

}  // namespace common
}  // namespace mori
