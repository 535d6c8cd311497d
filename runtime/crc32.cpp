#include <runtime/crc32.h>

#include <array>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LIGHTWEIGHT_DISPATCH_PCLMUL_CRC 1
#endif

namespace lightweight_dispatch {

namespace {

constexpr uint32_t kReflectedPolynomial = 0xEDB88320u;

// Table k maps a byte to its contribution k bytes further on, so eight bytes take one step.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) {
      c = (c & 1) ? kReflectedPolynomial ^ (c >> 1) : c >> 1;
    }
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (size_t k = 1; k < t.size(); ++k) {
      t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    }
  }
  return t;
}

uint32_t little_endian_word(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
      (static_cast<uint32_t>(p[3]) << 24);
}

// The running CRC state (not inverted) after `data`.
uint32_t update_from_tables(uint32_t state, const unsigned char* data, size_t size) {
  static const Tables tables = make_tables();
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint32_t low = state ^ little_endian_word(data + i);
    const uint32_t high = little_endian_word(data + i + 4);
    state = tables[7][low & 0xFF] ^ tables[6][(low >> 8) & 0xFF] ^ tables[5][(low >> 16) & 0xFF] ^
        tables[4][low >> 24] ^ tables[3][high & 0xFF] ^ tables[2][(high >> 8) & 0xFF] ^
        tables[1][(high >> 16) & 0xFF] ^ tables[0][high >> 24];
  }
  for (; i < size; ++i) {
    state = tables[0][(state ^ data[i]) & 0xFF] ^ (state >> 8);
  }
  return state;
}

#ifdef LIGHTWEIGHT_DISPATCH_PCLMUL_CRC

#define LIGHTWEIGHT_DISPATCH_PCLMUL __attribute__((target("pclmul,sse4.1")))

LIGHTWEIGHT_DISPATCH_PCLMUL inline __m128i load(const unsigned char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// lane * x^k: its low half times one constant, its high half times the other, added to `next`.
LIGHTWEIGHT_DISPATCH_PCLMUL inline __m128i fold(__m128i lane, __m128i constants, __m128i next) {
  return _mm_xor_si128(
      _mm_xor_si128(_mm_clmulepi64_si128(lane, constants, 0x00), _mm_clmulepi64_si128(lane, constants, 0x11)), next);
}

// Folding with carry-less multiplication (Intel's "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ"): four 128-bit lanes are folded forward 512 bits at a time, then into one lane, then reduced
// to 32 bits (Barrett). The constants are x^k mod P for the reflected zip polynomial, bit-reflected:
// they are the published ones (also in Linux's crc32-pclmul), checked here against the tables on
// every length and alignment by tests/cpp/crc32_check.cpp. Needs size >= 64 and a multiple of 16.
LIGHTWEIGHT_DISPATCH_PCLMUL uint32_t update_with_pclmul(
    uint32_t state, const unsigned char* data, size_t size) {
  const __m128i fold_512 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
  const __m128i fold_128 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);
  const __m128i fold_64_to_32 = _mm_set_epi64x(0, 0x163cd6124);
  const __m128i barrett = _mm_set_epi64x(0x1f7011641, 0x1db710641); // mu, then the polynomial
  const __m128i low_32_bits = _mm_set_epi32(0, 0, 0, -1);

  __m128i x1 = _mm_xor_si128(load(data), _mm_cvtsi32_si128(static_cast<int>(state)));
  __m128i x2 = load(data + 16);
  __m128i x3 = load(data + 32);
  __m128i x4 = load(data + 48);
  size_t at = 64;
  for (; at + 64 <= size; at += 64) {
    x1 = fold(x1, fold_512, load(data + at));
    x2 = fold(x2, fold_512, load(data + at + 16));
    x3 = fold(x3, fold_512, load(data + at + 32));
    x4 = fold(x4, fold_512, load(data + at + 48));
  }
  x1 = fold(x1, fold_128, x2);
  x1 = fold(x1, fold_128, x3);
  x1 = fold(x1, fold_128, x4);
  for (; at + 16 <= size; at += 16) {
    x1 = fold(x1, fold_128, load(data + at));
  }
  // 128 -> 64 bits, then 64 -> 32 (each appends zero bits, as the CRC's definition does).
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(x1, fold_128, 0x10));
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 4), _mm_clmulepi64_si128(_mm_and_si128(x1, low_32_bits), fold_64_to_32, 0x00));
  // Barrett reduction to the 32-bit remainder.
  __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x1, low_32_bits), barrett, 0x10);
  t = _mm_clmulepi64_si128(_mm_and_si128(t, low_32_bits), barrett, 0x00);
  return static_cast<uint32_t>(_mm_extract_epi32(_mm_xor_si128(x1, t), 1));
}

bool cpu_has_pclmul() {
  static const bool has = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return has;
}

#endif

} // namespace

uint32_t crc32_portable(const unsigned char* data, size_t size) {
  return ~update_from_tables(0xFFFFFFFFu, data, size);
}

uint32_t crc32(const unsigned char* data, size_t size) {
  uint32_t state = 0xFFFFFFFFu;
#ifdef LIGHTWEIGHT_DISPATCH_PCLMUL_CRC
  if (size >= 64 && cpu_has_pclmul()) {
    const size_t bulk = size & ~static_cast<size_t>(15);
    state = update_with_pclmul(state, data, bulk);
    data += bulk;
    size -= bulk;
  }
#endif
  return ~update_from_tables(state, data, size);
}

} // namespace lightweight_dispatch
