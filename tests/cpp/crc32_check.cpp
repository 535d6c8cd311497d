// The CRC-32 lite_predictor checks model archives with: the fast path (carry-less multiply, where the
// CPU has it) against the table-driven one on every length up to 1100 bytes at every alignment, larger
// buffers, and the standard check value. Prints "crc32_check: OK" or the first disagreement.
#include <runtime/crc32.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace ld = lightweight_dispatch;

int main() {
  const char* check = "123456789";
  const auto* digits = reinterpret_cast<const unsigned char*>(check);
  if (ld::crc32(digits, 9) != 0xCBF43926u || ld::crc32_portable(digits, 9) != 0xCBF43926u) {
    std::printf("crc32_check: wrong check value: %08x (portable %08x), expected cbf43926\n", ld::crc32(digits, 9),
                ld::crc32_portable(digits, 9));
    return 1;
  }
  std::mt19937 random(12345);
  std::vector<unsigned char> buffer((1 << 20) + 64);
  for (auto& byte : buffer) {
    byte = static_cast<unsigned char>(random());
  }
  std::vector<size_t> sizes;
  for (size_t size = 0; size <= 1100; ++size) {
    sizes.push_back(size);
  }
  for (size_t size : {4095u, 4096u, 65537u, 1u << 20}) {
    sizes.push_back(size);
  }
  for (size_t size : sizes) {
    for (size_t offset = 0; offset < 16; ++offset) {
      const unsigned char* data = buffer.data() + offset;
      const uint32_t fast = ld::crc32(data, size);
      const uint32_t portable = ld::crc32_portable(data, size);
      if (fast != portable) {
        std::printf("crc32_check: %zu bytes at offset %zu: %08x, tables say %08x\n", size, offset, fast, portable);
        return 1;
      }
    }
  }
  std::printf("crc32_check: OK\n");
  return 0;
}
