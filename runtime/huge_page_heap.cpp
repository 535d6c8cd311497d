#include <runtime/huge_page_heap.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#if defined(__linux__) && defined(__GLIBC__)
#include <sys/mman.h>
#define LIGHTWEIGHT_DISPATCH_HUGE_PAGE_HEAP 1
#endif

namespace lightweight_dispatch {

namespace {

// glibc's arenas other than the main one: regions of this size, aligned to it (HEAP_MAX_SIZE on 64-bit).
constexpr uintptr_t kArenaRegion = uintptr_t{64} << 20;

struct Registry {
  std::mutex mutex;
  HugePageHeapStatus status;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

void record(size_t advised_bytes, const std::string& problem) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.status.advised_bytes += advised_bytes;
  if (!problem.empty() && r.status.not_advised_because.empty()) {
    r.status.not_advised_because = problem;
  }
}

#ifdef LIGHTWEIGHT_DISPATCH_HUGE_PAGE_HEAP

// The mapping of /proc/self/maps that holds `address`; its name is empty for anonymous memory.
struct Mapping {
  std::string name;
  bool found = false;
};

Mapping mapping_holding(uintptr_t address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, permissions, offset, device, inode, name;
    fields >> range >> permissions >> offset >> device >> inode;
    std::getline(fields >> std::ws, name);
    const size_t dash = range.find('-');
    const uintptr_t begin = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (begin <= address && address < end) {
      return {name, true};
    }
  }
  return {};
}

void advise_arena_holding(uintptr_t address) {
  const Mapping mapping = mapping_holding(address);
  if (!mapping.found) {
    record(0, "the allocator's memory is not in /proc/self/maps");
    return;
  }
  if (mapping.name == "[heap]") {
    return; // the main thread's arena: left alone (see the header)
  }
  if (!mapping.name.empty()) {
    record(0, "the allocator's memory is a mapping of " + mapping.name);
    return;
  }
  const uintptr_t region = address / kArenaRegion * kArenaRegion;
  if (madvise(reinterpret_cast<void*>(region), kArenaRegion, MADV_HUGEPAGE) != 0) {
    record(0, "madvise(MADV_HUGEPAGE) was refused on a thread's arena");
    return;
  }
  record(kArenaRegion, "");
}

#endif

} // namespace

void advise_this_threads_heap() {
  thread_local bool advised = false;
  if (advised) {
    return;
  }
  advised = true;
#ifdef LIGHTWEIGHT_DISPATCH_HUGE_PAGE_HEAP
  static const std::string mode = transparent_huge_page_mode();
  if (mode.empty() || mode == "never") {
    record(0, mode.empty() ? "this kernel has no transparent huge pages"
                           : "transparent huge pages are off on this system (never)");
    return;
  }
  // A small block shows which arena this thread allocates from.
  void* probe = std::malloc(64);
  const uintptr_t address = reinterpret_cast<uintptr_t>(probe);
  std::free(probe);
  advise_arena_holding(address);
#else
  record(0, "transparent huge pages are advised on Linux with glibc only");
#endif
}

HugePageHeapStatus huge_page_heap_status() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return r.status;
}

std::string transparent_huge_page_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!in || !std::getline(in, line)) {
    return "";
  }
  // "always [madvise] never": the bracketed one is in force.
  const size_t open = line.find('[');
  const size_t close = line.find(']', open);
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

size_t anonymous_huge_page_bytes() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("AnonHugePages:", 0) == 0) {
      std::istringstream fields(line.substr(14));
      size_t kilobytes = 0;
      fields >> kilobytes;
      return kilobytes * 1024;
    }
  }
  return 0;
}

} // namespace lightweight_dispatch
