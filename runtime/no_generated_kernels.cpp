// USE_LIGHTWEIGHT_DISPATCH=OFF: the stock lite interpreter only, no generated kernels.
#include <lightweight_dispatch/kernel_table.h>

namespace lightweight_dispatch {

c10::ArrayRef<GeneratedKernel> generated_kernels() {
  return {};
}

void register_custom_ops_with_dispatcher() {}

bool lightweight_dispatch_built() {
  return false;
}

} // namespace lightweight_dispatch
