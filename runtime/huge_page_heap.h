// The weights on transparent huge pages (Linux, glibc): oneDNN's reordered copies of a model's weights are tens
// of MB over thousands of 4 kB pages, read on every run; every run after other work has evicted the caches (an
// app's other code, or the peers in the benchmark's interleaved rounds) also walks the page tables for each of
// them again. With 2 MB pages it walks 512 times fewer. Most kernels leave the choice to the application (THP
// is "madvise" on most distributions): a region gets huge pages only if advised, and only for pages faulted in
// after the advice.
//
// glibc gives each thread an arena: the main thread's is the program's heap (grown with brk), the others' are
// 64 MB regions it maps and makes accessible as they fill. The reordered weights land in the arena of the
// thread that prepared the kernels (the background preparation run's). Each thread that runs a model advises
// its own arena once, if it is such a region: all 64 MB of it, the accessible part and the reserve alike (the
// advice stays with the pages glibc makes accessible later). An arena that outgrows its region gets more 64 MB
// regions from glibc, not advised: a model with more reordered weights than that (DistilBERT, 265 MB) has the
// rest on 4 kB pages. The main heap is left on 4 kB pages: growing it
// ahead and advising it gave the activations huge pages too, no faster a run (cold-cache A/B within 1%), but
// on this project's VM one fresh process in two then faulted its load-time allocations in 2-3x slower.
// Nothing is touched ahead: the advice costs address space, not memory.
#pragma once

#include <cstddef>
#include <string>

namespace lightweight_dispatch {

// Advises the calling thread's arena for huge pages if it is not the main heap, once per thread (later calls
// return at once). Call after keep_large_allocations_in_heap: its mmap threshold keeps large blocks (the
// reordered weights) in the arenas rather than in mappings of their own.
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
