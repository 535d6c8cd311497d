// CRC-32 with zip's polynomial, fast enough to check every byte of a model at load.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lightweight_dispatch {

// The CRC-32 zip records for `data` (crc32(b"123456789") == 0xCBF43926). Uses the CPU's carry-less
// multiply (PCLMULQDQ) where it has one, else crc32_portable.
uint32_t crc32(const unsigned char* data, size_t size);

// The same, from tables, eight bytes per step: any CPU.
uint32_t crc32_portable(const unsigned char* data, size_t size);

} // namespace lightweight_dispatch
