// The heap pre-fault's effect, measured without a race against a loader: a helper thread faults in 17 MB of the
// main heap above what is in use (the heap's pad holds it), then this thread allocates 16 MB from that heap and writes every page of it,
// counting its own page faults; then it does the same with the next 16 MB, which nothing faulted in. Prints
// "heap_prefault_check: OK ...", "heap_prefault_check: SKIP (reason)" where the system cannot populate pages
// ahead, or what went wrong.
#include <runtime/allocator_settings.h>
#include <runtime/heap_prefault.h>

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace ld = lightweight_dispatch;

namespace {

constexpr size_t kBlockBytes = size_t{16} << 20;

long this_threads_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// Page faults this thread takes allocating a block of kBlockBytes from the heap and writing every byte of it.
long faults_writing_a_fresh_block(void*& block) {
  const long before = this_threads_page_faults();
  block = std::malloc(kBlockBytes);
  if (block != nullptr) {
    std::memset(block, 0x5a, kBlockBytes);
  }
  return this_threads_page_faults() - before;
}

} // namespace

int main() {
  if (!ld::keep_large_allocations_in_heap()) {
    std::printf("heap_prefault_check: SKIP (not glibc: the heap settings do not apply)\n");
    return 0;
  }
  if (!ld::allocates_from_main_heap()) {
    std::printf("heap_prefault_check: FAILED: main() does not allocate from the main heap\n");
    return 1;
  }
  // Grows the heap: the break moves past this block by the 64 MB pad, which nothing has touched yet.
  void* first = std::malloc(size_t{1} << 20);
  std::memset(first, 1, size_t{1} << 20);

  ld::HeapPrefault prefault(kBlockBytes + (size_t{1} << 20)); // the block and its neighbour's header page
  std::thread helper([&prefault] {
    while (prefault.step() == ld::HeapPrefault::Step::Faulted) {
    }
  });
  helper.join();
  if (prefault.populated_bytes() == 0) {
    std::printf("heap_prefault_check: SKIP (this kernel cannot populate pages ahead: MADV_POPULATE_WRITE, Linux 5.14)\n");
    return 0;
  }
  if (prefault.populated_bytes() < kBlockBytes) {
    std::printf("heap_prefault_check: FAILED: only %zu bytes faulted in\n", prefault.populated_bytes());
    return 1;
  }
  void* ahead_block = nullptr;
  void* fresh_block = nullptr;
  const long faults_ahead = faults_writing_a_fresh_block(ahead_block);
  const long faults_fresh = faults_writing_a_fresh_block(fresh_block);
  const long pages = static_cast<long>(kBlockBytes / 4096);
  // Without the helper every page is a fault (4096 of 4 kB; 8 of 2 MB where transparent huge pages are "always");
  // with it, next to none.
  if (ahead_block == nullptr || fresh_block == nullptr || faults_fresh < 8 || faults_ahead * 10 > faults_fresh) {
    std::printf("heap_prefault_check: FAILED: %ld page faults writing the faulted-in block, %ld writing the next one "
                "(%ld pages each)\n", faults_ahead, faults_fresh, pages);
    return 1;
  }
  std::printf("heap_prefault_check: OK (%ld page faults writing the faulted-in 16 MB, %ld writing the next 16 MB)\n",
      faults_ahead, faults_fresh);
  std::free(fresh_block);
  std::free(ahead_block);
  std::free(first);
  return 0;
}
