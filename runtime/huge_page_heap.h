// The heap on transparent huge pages (Linux, glibc): a model's weights, oneDNN's reordered copies of them and an
// inference's activations are tens of MB spread over thousands of 4 kB pages; every run after other work has
// evicted the caches (an app's other code, or the peers in the benchmark's interleaved rounds) also walks the
// page tables for each of them again. With 2 MB pages it walks 512 times fewer. Most kernels leave the choice
// to the application (THP is "madvise" on most distributions): a region gets huge pages only if advised, and
// only for pages faulted in after the advice.
//
// glibc gives each thread an arena: the main thread's is the program's heap (grown with brk), the others' are
// 64 MB regions it maps and makes accessible as they fill. The weights oneDNN reorders land in the arena of the
// thread that prepared the kernels (the background preparation run's), activations in the running thread's.
// So each thread that runs a model advises its own arena once:
// - another thread's arena: the whole 64 MB region, accessible part and reserve alike (the advice stays with
//   the pages glibc makes accessible later);
// - the main heap, which brk extends with pages that would not carry the advice: it is grown once ahead
//   (blocks allocated and freed again, which glibc keeps as the free top of the heap while below its trim
//   threshold) and that range advised, so the allocations after it are carved from advised pages.
// Nothing is touched ahead: the advice costs address space, not memory.
#pragma once

#include <cstddef>
#include <string>

namespace lightweight_dispatch {

// Bytes of main heap grown ahead and advised: below glibc's trim threshold as kInferenceAllocatorSettings sets
// it (256 MB) with its top pad (64 MB) added, so freeing the reserve does not give it back to the system.
constexpr size_t kMainHeapReserve = size_t{128} << 20;

// Advises the calling thread's arena for huge pages, once per thread (later calls return at once). Call after
// keep_large_allocations_in_heap: its mmap threshold keeps large blocks (the reserve's, the model's) in the
// arenas rather than in mappings of their own.
void advise_this_threads_heap();

struct HugePageHeapStatus {
  size_t advised_bytes = 0;        // arena bytes advised so far, in this process
  std::string not_advised_because; // the first reason a thread's arena was not advised (empty: none)
};
HugePageHeapStatus huge_page_heap_status();

// The system's transparent huge page mode: "always", "madvise" or "never" (empty where it cannot be read).
std::string transparent_huge_page_mode();

// This process's anonymous memory on huge pages now (AnonHugePages in /proc/self/smaps_rollup), 0 where unknown.
size_t anonymous_huge_page_bytes();

} // namespace lightweight_dispatch
