// Which kernel a generated function calls, observed rather than inferred from its result: this program
// defines the per-backend kernels the generated code links against (at::cpu::hardtanh_,
// at::native::hardtanh_quantized_cpu_, ...) as counting wrappers that forward to LibTorch's own
// definitions (dlsym RTLD_NEXT). Static linking binds the generated code to these definitions; LibTorch's
// own calls of the same symbols (cat_quantized_cpu dequantizes through the dispatcher, which reaches
// dequantize_quantized) are not counted: only the outermost call is, the one the generated code made. Each
// native op with a QuantizedCPU kernel is fed a quantized tensor and a float tensor, and must call exactly
// the kernel of that backend.
#include <lightweight_dispatch/kernel_table.h>

#include <ATen/ops/cat_cpu_dispatch.h>
#include <ATen/ops/cat_native.h>
#include <ATen/ops/dequantize_cpu_dispatch.h>
#include <ATen/ops/dequantize_native.h>
#include <ATen/ops/hardtanh_cpu_dispatch.h>
#include <ATen/ops/hardtanh_native.h>
#include <ATen/ops/quantize_per_tensor.h>
#include <ATen/ops/rand.h>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>

namespace ld = lightweight_dispatch;

namespace {

std::map<std::string, int>& calls() {
  static std::map<std::string, int> counts;
  return counts;
}

// Counts a call made from outside any counted kernel, for the length of the wrapper's call.
class CountedCall {
 public:
  explicit CountedCall(const char* kernel) {
    if (depth_++ == 0) {
      calls()[kernel] += 1;
    }
  }
  ~CountedCall() {
    --depth_;
  }

 private:
  static inline int depth_ = 0;
};

// LibTorch's definition of the symbol this program also defines.
template <typename Function>
Function libtorch_definition(const char* mangled_name) {
  void* address = dlsym(RTLD_NEXT, mangled_name);
  if (address == nullptr) {
    std::cerr << "backend_choice_check: FAIL: LibTorch does not export " << mangled_name << "\n";
    std::exit(1);
  }
  return reinterpret_cast<Function>(address);
}

} // namespace

// --- the counting wrappers, with the signatures the per-operator headers declare

at::Tensor at::cpu::dequantize(const at::Tensor& self) {
  static const auto real = libtorch_definition<at::Tensor (*)(const at::Tensor&)>("_ZN2at3cpu10dequantizeERKNS_6TensorE");
  const CountedCall counted("at::cpu::dequantize");
  return real(self);
}

at::Tensor at::native::dequantize_quantized(const at::Tensor& self) {
  static const auto real =
      libtorch_definition<at::Tensor (*)(const at::Tensor&)>("_ZN2at6native20dequantize_quantizedERKNS_6TensorE");
  const CountedCall counted("at::native::dequantize_quantized");
  return real(self);
}

at::Tensor& at::cpu::hardtanh_(at::Tensor& self, const at::Scalar& min_val, const at::Scalar& max_val) {
  static const auto real = libtorch_definition<at::Tensor& (*)(at::Tensor&, const at::Scalar&, const at::Scalar&)>(
      "_ZN2at3cpu9hardtanh_ERNS_6TensorERKN3c106ScalarES6_");
  const CountedCall counted("at::cpu::hardtanh_");
  return real(self, min_val, max_val);
}

at::Tensor& at::native::hardtanh_quantized_cpu_(at::Tensor& self, const at::Scalar& min_val, const at::Scalar& max_val) {
  static const auto real = libtorch_definition<at::Tensor& (*)(at::Tensor&, const at::Scalar&, const at::Scalar&)>(
      "_ZN2at6native23hardtanh_quantized_cpu_ERNS_6TensorERKN3c106ScalarES6_");
  const CountedCall counted("at::native::hardtanh_quantized_cpu_");
  return real(self, min_val, max_val);
}

at::Tensor at::cpu::cat(const at::ITensorListRef& tensors, int64_t dim) {
  static const auto real = libtorch_definition<at::Tensor (*)(const at::ITensorListRef&, int64_t)>(
      "_ZN2at3cpu3catERKN3c108IListRefINS_6TensorEEEl");
  const CountedCall counted("at::cpu::cat");
  return real(tensors, dim);
}

at::Tensor at::native::cat_quantized_cpu(const at::ITensorListRef& tensors, int64_t dim) {
  static const auto real = libtorch_definition<at::Tensor (*)(const at::ITensorListRef&, int64_t)>(
      "_ZN2at6native17cat_quantized_cpuERKN3c108IListRefINS_6TensorEEEl");
  const CountedCall counted("at::native::cat_quantized_cpu");
  return real(tensors, dim);
}

namespace {

int failures = 0;
int passes = 0;

const ld::GeneratedKernel* find_kernel(const char* op_name) {
  for (const auto& entry : ld::generated_kernels()) {
    if (std::strcmp(entry.op_name, op_name) == 0) {
      return &entry;
    }
  }
  return nullptr;
}

// Runs the op's generated function on `arguments` and checks that exactly `expected_kernel` was called.
void expect_kernel(const char* op_name, torch::jit::Stack arguments, const std::string& expected_kernel, const char* what) {
  const ld::GeneratedKernel* kernel = find_kernel(op_name);
  if (kernel == nullptr) {
    std::cout << "FAIL " << op_name << ": not in this build's kernel table\n";
    ++failures;
    return;
  }
  calls().clear();
  kernel->unboxed(arguments);
  const std::map<std::string, int> expected{{expected_kernel, 1}};
  if (calls() == expected && arguments.size() == 1) {
    std::cout << "ok   " << op_name << " on " << what << " -> " << expected_kernel << "\n";
    ++passes;
    return;
  }
  std::cout << "FAIL " << op_name << " on " << what << ": expected one call of " << expected_kernel << ", got";
  for (const auto& [name, count] : calls()) {
    std::cout << " " << name << " x" << count;
  }
  std::cout << (calls().empty() ? " no counted kernel" : "") << "\n";
  ++failures;
}

} // namespace

int main() {
  const at::Tensor x = at::rand({2, 3, 4, 4});
  const auto quantized = [&] { return at::quantize_per_tensor(x, 0.01, 3, at::kQUInt8); };

  expect_kernel("aten::dequantize.self", {quantized()}, "at::native::dequantize_quantized", "a quantized tensor");
  expect_kernel("aten::dequantize.self", {x.clone()}, "at::cpu::dequantize", "a float tensor");
  expect_kernel("aten::hardtanh_", {quantized(), 0.0, 0.5}, "at::native::hardtanh_quantized_cpu_", "a quantized tensor");
  expect_kernel("aten::hardtanh_", {x.clone(), 0.0, 0.5}, "at::cpu::hardtanh_", "a float tensor");
  expect_kernel(
      "aten::cat", {c10::List<at::Tensor>({quantized(), quantized()}), int64_t{1}}, "at::native::cat_quantized_cpu",
      "quantized tensors");
  expect_kernel("aten::cat", {c10::List<at::Tensor>({x, x}), int64_t{1}}, "at::cpu::cat", "float tensors");

  std::cout << "backend_choice_check: " << passes << " passed, " << failures << " failed\n";
  return failures == 0 ? 0 : 1;
}
