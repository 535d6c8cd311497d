#include <lightweight_dispatch/dispatcher_call.h>

#include <ATen/core/dispatch/Dispatcher.h>

namespace lightweight_dispatch::generated {

const c10::OperatorHandle& find_dispatcher_operator(const char* name, const char* overload) {
  // Handles stay valid for the life of the process; each is looked up once, by its function's static.
  return *new c10::OperatorHandle(c10::Dispatcher::singleton().findSchemaOrThrow(name, overload));
}

void call_through_dispatcher(const c10::OperatorHandle& op, torch::jit::Stack& stack) {
  op.callBoxed(stack);
}

} // namespace lightweight_dispatch::generated
