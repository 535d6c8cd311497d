#include <runtime/heap_prefault.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#if defined(__linux__) && defined(__GLIBC__)
#define LIGHTWEIGHT_DISPATCH_HEAP_PREFAULT 1
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

#ifdef LIGHTWEIGHT_DISPATCH_HEAP_PREFAULT
uintptr_t page_size() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

uintptr_t page_down(uintptr_t address) {
  return address & ~(page_size() - 1);
}

// The end of the last page in [from, to) that is resident, `from` if none is, or `to` if the range is not mapped
// as the heap should be. In the heap above what malloc has handed out, a resident page is one somebody wrote.
uintptr_t end_of_last_touched_page(uintptr_t from, uintptr_t to) {
  if (from >= to) {
    return to;
  }
  std::vector<unsigned char> resident((to - from) / page_size());
  if (mincore(reinterpret_cast<void*>(from), to - from, resident.data()) != 0) {
    return to;
  }
  for (size_t page = resident.size(); page > 0; --page) {
    if ((resident[page - 1] & 1) != 0) {
      return from + page * page_size();
    }
  }
  return from;
}

// The first page above the last one the process has touched in the main heap, which is where the heap's free top
// starts (glibc's top chunk ends at the program break; pages it has never handed out are not resident). Only
// the last 128 MB below the break are looked at: the top is never larger than the heap's pad above what malloc
// asked for (64 MB, runtime/allocator_settings.h) plus one allocation below the mmap threshold (32 MB).
uintptr_t first_untouched_heap_page(uintptr_t heap_start, uintptr_t program_break) {
  constexpr uintptr_t kLookedAt = uintptr_t{128} << 20;
  return end_of_last_touched_page(
      std::max(heap_start, program_break - std::min(program_break, kLookedAt)), program_break);
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

HeapPrefault::Step HeapPrefault::step() {
#ifdef LIGHTWEIGHT_DISPATCH_HEAP_PREFAULT
  if (done_) {
    return Step::Done;
  }
  if (populate_below_ == 0) { // the first step: where the untouched heap starts
    const uintptr_t heap_start = main_heap_start();
    if (heap_start == 0) {
      done_ = true;
      return Step::Done;
    }
    populated_to_ = first_untouched_heap_page(heap_start, page_down(reinterpret_cast<uintptr_t>(sbrk(0))));
    populate_below_ = populated_to_ + page_down(budget_bytes_);
  }
  // The heap grows as the loader allocates; pages above the break are not mapped yet.
  const uintptr_t wanted_to = std::min(page_down(reinterpret_cast<uintptr_t>(sbrk(0))), populate_below_);
  if (populated_to_ >= populate_below_) {
    done_ = true;
    return Step::Done;
  }
  if (populated_to_ >= wanted_to) {
    return Step::CaughtUp;
  }
  // The loading thread may have written past us (faster than a step): go on above the pages it touched, up to
  // 64 MB further (looking further costs more than stepping over pages that are there already).
  populated_to_ = std::max(populated_to_,
      std::min(end_of_last_touched_page(populated_to_, std::min(wanted_to, populated_to_ + (uintptr_t{64} << 20))),
          wanted_to));
  if (populated_to_ >= wanted_to) {
    return Step::CaughtUp;
  }
  const size_t length = std::min<size_t>(wanted_to - populated_to_, kStepBytes);
  if (madvise(reinterpret_cast<void*>(populated_to_), length, MADV_POPULATE_WRITE) != 0) {
    // EINTR, EAGAIN: try again; EINVAL, ENOSYS: this kernel cannot populate ahead; ENOMEM: the heap shrank (a trim)
    done_ = errno != EINTR && errno != EAGAIN;
    return done_ ? Step::Done : Step::CaughtUp;
  }
  populated_to_ += length;
  populated_bytes_.fetch_add(length, std::memory_order_relaxed);
  return Step::Faulted;
#else
  return Step::Done;
#endif
}

} // namespace lightweight_dispatch
