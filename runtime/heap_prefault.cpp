#include <runtime/heap_prefault.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#if defined(__linux__) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#define LIGHTWEIGHT_DISPATCH_HEAP_PREFAULT 1
#include <malloc.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 // Linux 5.14; older headers lack the name
#endif
#endif

namespace lightweight_dispatch {

namespace {

constexpr size_t kStepBytes = size_t{1} << 20;
constexpr auto kIdleWait = std::chrono::microseconds(250);

#ifdef LIGHTWEIGHT_DISPATCH_HEAP_PREFAULT
uintptr_t page_size() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

uintptr_t page_down(uintptr_t address) {
  return address & ~(page_size() - 1);
}

// The first page above the last one the process has touched in the main heap, which is where the heap's free top
// starts (glibc's top chunk ends at the program break; pages it has never handed out are not resident). Only
// the last 128 MB below the break are looked at: the top is never larger than the heap's pad above what malloc
// asked for (64 MB, runtime/allocator_settings.h) plus one allocation below the mmap threshold (32 MB).
uintptr_t first_untouched_heap_page(uintptr_t heap_start, uintptr_t program_break) {
  constexpr uintptr_t kLookedAt = uintptr_t{128} << 20;
  const uintptr_t from = std::max(heap_start, program_break - std::min(program_break, kLookedAt));
  if (from >= program_break) {
    return program_break;
  }
  std::vector<unsigned char> resident((program_break - from) / page_size());
  if (mincore(reinterpret_cast<void*>(from), program_break - from, resident.data()) != 0) {
    return program_break; // not the heap we took it for: populate nothing
  }
  for (size_t page = resident.size(); page > 0; --page) {
    if ((resident[page - 1] & 1) != 0) {
      return from + page * page_size();
    }
  }
  return from;
}

// The main heap's first address, from /proc/self/maps ("[heap]"), or 0 if it has none yet.
uintptr_t main_heap_start() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.size() > 6 && line.compare(line.size() - 6, 6, "[heap]") == 0) {
      return static_cast<uintptr_t>(std::stoull(line.substr(0, line.find('-')), nullptr, 16));
    }
  }
  return 0;
}
#endif

} // namespace

size_t heap_prefault_budget(size_t file_bytes) {
  return file_bytes + (size_t{32} << 20);
}

bool allocates_from_main_heap() {
#ifdef LIGHTWEIGHT_DISPATCH_HEAP_PREFAULT
  return syscall(SYS_gettid) == getpid();
#else
  return false;
#endif
}

bool HeapPrefault::stopped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stop_;
}

void HeapPrefault::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  woken_.notify_all();
}

void HeapPrefault::run() {
#ifdef LIGHTWEIGHT_DISPATCH_HEAP_PREFAULT
  const uintptr_t heap_start = main_heap_start();
  if (heap_start == 0) {
    return;
  }
  uintptr_t populated_to = first_untouched_heap_page(heap_start, page_down(reinterpret_cast<uintptr_t>(sbrk(0))));
  const uintptr_t populate_below = populated_to + page_down(budget_bytes_);
  while (populated_to < populate_below && !stopped()) {
    // The heap grows as the loader allocates; pages above the break are not mapped yet.
    const uintptr_t wanted_to = std::min(page_down(reinterpret_cast<uintptr_t>(sbrk(0))), populate_below);
    if (populated_to < wanted_to) {
      const size_t length = std::min<size_t>(wanted_to - populated_to, kStepBytes);
      if (madvise(reinterpret_cast<void*>(populated_to), length, MADV_POPULATE_WRITE) == 0) {
        populated_to += length;
        populated_bytes_.fetch_add(length, std::memory_order_relaxed);
        continue;
      }
      if (errno != EINTR && errno != EAGAIN) {
        return; // EINVAL, ENOSYS: this kernel cannot populate ahead; ENOMEM: the heap shrank under us (a trim)
      }
    }
    std::unique_lock<std::mutex> lock(mutex_);
    woken_.wait_for(lock, kIdleWait, [this] { return stop_; });
  }
#endif
}

} // namespace lightweight_dispatch
