// Calling an operator through its c10 operator handle: only for the operators quantized_ops.yaml marks
// `dispatcher` (LibTorch exports no entry point for them). Generated code finds the handle once per
// operator (a function-local static) and calls it boxed on the interpreter's stack, which holds every
// argument by then. Kept out of line so generated shards need not include the dispatcher's headers.
#pragma once

#include <ATen/core/stack.h>

namespace c10 {
class OperatorHandle;
} // namespace c10

namespace lightweight_dispatch::generated {

// The operator's handle; throws c10::Error naming the operator if LibTorch does not register it.
const c10::OperatorHandle& find_dispatcher_operator(const char* name, const char* overload);

// Runs the operator on the arguments at the top of `stack` and leaves its results in their place.
void call_through_dispatcher(const c10::OperatorHandle& op, torch::jit::Stack& stack);

} // namespace lightweight_dispatch::generated
