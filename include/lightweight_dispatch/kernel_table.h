// The table of generated kernels a lightweight-dispatch build carries: one row per operator.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>
#include <c10/util/ArrayRef.h>

namespace lightweight_dispatch {

// One generated unboxing function: it expects every schema argument on the stack (defaults filled
// in by the binder), calls the operator's per-backend kernel, and leaves the results in their place.
struct GeneratedKernel {
  const char* op_name; // "aten::add.Tensor"
  const char* schema;  // the JIT schema; its default values fill arguments a call site omits
  void (*unboxed)(torch::jit::Stack& stack);
  // nullptr: the function calls LibTorch's kernel directly. Otherwise it calls the operator through the
  // c10 dispatcher (quantized_ops.yaml's `dispatcher` entries), and this says why.
  const char* dispatcher_reason;
};

// The kernel's schema, parsed from the string its table row carries (throws on a malformed one).
c10::FunctionSchema parse_kernel_schema(const GeneratedKernel& kernel);

// Defined by the generated KernelTable.cpp, or empty in a build without lightweight dispatch.
c10::ArrayRef<GeneratedKernel> generated_kernels();

// Registers the project's own operators (custom_ops.yaml: torchvision's detection ops) with the c10
// dispatcher, so the stock interpreter (--dispatch dynamic) finds them too. Idempotent. Static dispatch
// does not need it. Defined in the generated CustomOpRegistration.cpp (a no-op without lightweight dispatch).
void register_custom_ops_with_dispatcher();

// Whether this binary was built with USE_LIGHTWEIGHT_DISPATCH=ON (a table exists, even if empty).
bool lightweight_dispatch_built();

} // namespace lightweight_dispatch
