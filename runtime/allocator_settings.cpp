#include <runtime/allocator_settings.h>

#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace lightweight_dispatch {

bool keep_large_allocations_in_heap(const AllocatorSettings& settings) {
#if defined(__GLIBC__)
  static std::once_flag once;
  static bool applied = false;
  std::call_once(once, [&] {
    applied = mallopt(M_MMAP_THRESHOLD, static_cast<int>(settings.mmap_threshold)) == 1 &&
        mallopt(M_TRIM_THRESHOLD, static_cast<int>(settings.trim_threshold)) == 1 &&
        mallopt(M_TOP_PAD, static_cast<int>(settings.top_pad)) == 1;
  });
  return applied;
#else
  (void)settings;
  return false;
#endif
}

} // namespace lightweight_dispatch
