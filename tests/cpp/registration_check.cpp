// A C++-only check, no Python involved: the torchvision kernels, linked from static archives (no
// whole-archive flags), are found and run both through the generated static-dispatch table and, after
// the explicit registration call, through the c10 dispatcher.
#include <lightweight_dispatch/kernel_table.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/tensor.h>

#include <cstring>
#include <iostream>
#include <vector>

namespace ld = lightweight_dispatch;

namespace {

// Three boxes: the second overlaps the first heavily (IoU 0.81) and scores lower, so NMS keeps 0 and 2.
at::Tensor boxes() {
  return at::tensor({0.0f, 0.0f, 10.0f, 10.0f, 1.0f, 1.0f, 10.0f, 10.0f, 20.0f, 20.0f, 30.0f, 30.0f}).view({3, 4});
}

at::Tensor scores() {
  return at::tensor({0.9f, 0.8f, 0.7f});
}

bool kept_first_and_last(const at::Tensor& keep) {
  return keep.scalar_type() == at::kLong && keep.numel() == 2 && keep[0].item<int64_t>() == 0 &&
      keep[1].item<int64_t>() == 2;
}

int fail(const std::string& message) {
  std::cerr << "registration_check: FAIL: " << message << "\n";
  return 1;
}

} // namespace

int main() {
  const c10::OperatorName nms_name{"torchvision::nms", ""};
  if (c10::Dispatcher::singleton().findOp(nms_name).has_value()) {
    return fail("the dispatcher knows torchvision::nms before anything registered it");
  }

  // 1. Static dispatch: the generated table's unboxing function calls the kernel directly.
  const ld::GeneratedKernel* kernel = nullptr;
  for (const auto& entry : ld::generated_kernels()) {
    if (std::strcmp(entry.op_name, "torchvision::nms") == 0) {
      kernel = &entry;
    }
  }
  if (kernel == nullptr) {
    return fail("torchvision::nms is not in the generated kernel table");
  }
  std::vector<c10::IValue> stack{boxes(), scores(), 0.5};
  kernel->unboxed(stack);
  if (stack.size() != 1 || !kept_first_and_last(stack[0].toTensor())) {
    return fail("the generated torchvision::nms kernel returned the wrong boxes");
  }
  std::cout << "static table: torchvision::nms kept boxes 0 and 2\n";

  // 2. The explicit registration call (twice: it is idempotent), then a dispatcher call.
  ld::register_custom_ops_with_dispatcher();
  ld::register_custom_ops_with_dispatcher();
  const auto handle = c10::Dispatcher::singleton().findSchema(nms_name);
  if (!handle.has_value()) {
    return fail("torchvision::nms is not registered after register_custom_ops_with_dispatcher()");
  }
  const at::Tensor keep = handle->typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>().call(
      boxes(), scores(), 0.5);
  if (!kept_first_and_last(keep)) {
    return fail("the dispatcher's torchvision::nms returned the wrong boxes");
  }
  std::cout << "dispatcher: torchvision::nms kept boxes 0 and 2\n";
  for (const char* name : {"roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool", "deform_conv2d"}) {
    if (!c10::Dispatcher::singleton().findSchema({std::string("torchvision::") + name, ""}).has_value()) {
      return fail(std::string("torchvision::") + name + " is not registered");
    }
  }
  std::cout << "registration_check: OK\n";
  return 0;
}
