// Keeping a model's large per-call temporaries in the heap rather than in fresh mmap'd pages.
//
// glibc serves allocations above its mmap threshold (128 kB at start, raised adaptively as large blocks
// are freed) with mmap and returns them with munmap, so in a fresh process every large temporary of an
// inference (im2col buffers, activations) arrives as new zero-filled pages: page faults on every call.
// Raising the thresholds keeps those blocks in the heap for reuse.
#pragma once

#include <cstddef>

namespace lightweight_dispatch {

struct AllocatorSettings {
  size_t mmap_threshold;  // blocks above this come from mmap (glibc's M_MMAP_THRESHOLD)
  size_t trim_threshold;  // free memory at the top of the heap above this is returned to the system
  size_t top_pad;         // extra bytes the heap grows by each time
};

// 32 MB (glibc's largest mmap threshold on 64-bit; mallopt refuses more) / 256 MB / 64 MB: the test models'
// temporaries are all below 32 MB.
constexpr AllocatorSettings kInferenceAllocatorSettings{size_t{32} << 20, size_t{256} << 20, size_t{64} << 20};

// Applies `settings` once per process (later calls do nothing) and says whether they took effect:
// false where the C library is not glibc.
bool keep_large_allocations_in_heap(const AllocatorSettings& settings = kInferenceAllocatorSettings);

} // namespace lightweight_dispatch
