#include <lightweight_dispatch/unboxing_helpers.h>

namespace lightweight_dispatch::generated {

int64_t to_int(const c10::IValue& value) {
  return value.toInt();
}

double to_double(const c10::IValue& value) {
  return value.toDouble();
}

bool to_bool(const c10::IValue& value) {
  return value.toBool();
}

at::Scalar to_scalar(const c10::IValue& value) {
  return value.toScalar();
}

at::ScalarType to_scalar_type(const c10::IValue& value) {
  return value.toScalarType();
}

at::Layout to_layout(const c10::IValue& value) {
  return value.toLayout();
}

at::Device to_device(const c10::IValue& value) {
  return value.toDevice();
}

at::MemoryFormat to_memory_format(const c10::IValue& value) {
  return value.toMemoryFormat();
}

std::string_view to_string_view(const c10::IValue& value) {
  return value.toStringView();
}

at::DimVector to_dim_vector(const c10::IValue& value) {
  return value.toDimVector();
}

std::vector<double> to_double_vector(const c10::IValue& value) {
  return value.toDoubleVector();
}

std::vector<at::Tensor> to_tensor_vector(const c10::IValue& value) {
  return value.toTensorVector();
}

c10::List<at::Tensor> to_tensor_list(const c10::IValue& value) {
  return value.toTensorList();
}

std::optional<at::Tensor> to_optional_tensor(const c10::IValue& value) {
  return value.toOptional<at::Tensor>();
}

std::optional<int64_t> to_optional_int(const c10::IValue& value) {
  return value.toOptional<int64_t>();
}

std::optional<double> to_optional_double(const c10::IValue& value) {
  return value.toOptional<double>();
}

std::optional<bool> to_optional_bool(const c10::IValue& value) {
  return value.toOptional<bool>();
}

std::optional<at::Scalar> to_optional_scalar(const c10::IValue& value) {
  return value.toOptional<at::Scalar>();
}

std::optional<at::ScalarType> to_optional_scalar_type(const c10::IValue& value) {
  return value.toOptional<at::ScalarType>();
}

std::optional<at::Layout> to_optional_layout(const c10::IValue& value) {
  return value.toOptional<at::Layout>();
}

std::optional<at::Device> to_optional_device(const c10::IValue& value) {
  return value.toOptional<at::Device>();
}

std::optional<at::MemoryFormat> to_optional_memory_format(const c10::IValue& value) {
  return value.toOptional<at::MemoryFormat>();
}

std::optional<std::string_view> to_optional_string_view(const c10::IValue& value) {
  return value.toOptional<std::string_view>();
}

std::optional<at::DimVector> optional_dim_vector(const c10::IValue& value) {
  if (value.isNone()) {
    return std::nullopt;
  }
  return value.toDimVector();
}

std::optional<std::vector<double>> optional_double_vector(const c10::IValue& value) {
  return value.toOptional<std::vector<double>>();
}

c10::List<std::optional<at::Tensor>> optional_tensor_list(const c10::IValue& value) {
  if (value.isOptionalTensorList()) {
    return value.toOptionalTensorList();
  }
  c10::List<std::optional<at::Tensor>> list;
  for (const c10::IValue& element : value.toListRef()) {
    list.push_back(element.toOptional<at::Tensor>());
  }
  return list;
}

void drop_arguments(torch::jit::Stack& stack, size_t count) {
  stack.erase(stack.end() - static_cast<std::ptrdiff_t>(count), stack.end());
}

void push_result(torch::jit::Stack& stack, at::Tensor result) {
  stack.emplace_back(std::move(result));
}

void push_result(torch::jit::Stack& stack, std::vector<at::Tensor> result) {
  stack.emplace_back(std::move(result));
}

void push_result(torch::jit::Stack& stack, c10::IValue result) {
  stack.push_back(std::move(result));
}

c10::IValue box_scalar(const at::Scalar& result) {
  return c10::IValue(result);
}

// replace_arguments pushes itself rather than calling push_result: at -Os that call is not inlined and
// costs 12 instructions per op call (callgrind, micro_add_loop).
void replace_arguments(torch::jit::Stack& stack, size_t count, at::Tensor result) {
  drop_arguments(stack, count);
  stack.emplace_back(std::move(result));
}

void replace_arguments(torch::jit::Stack& stack, size_t count, std::vector<at::Tensor> result) {
  drop_arguments(stack, count);
  stack.emplace_back(std::move(result));
}

void replace_arguments(torch::jit::Stack& stack, size_t count, c10::IValue result) {
  drop_arguments(stack, count);
  stack.push_back(std::move(result));
}

bool holds_quantized_tensor(const c10::IValue& value) {
  // unsafeToTensorImpl after isTensor: toTensor() is an out-of-line call with its own check at -Os, and this
  // runs on every call of a list op on the float path (benchmarks/backend_cost.py measures it).
  if (value.isTensor()) {
    return value.unsafeToTensorImpl()->is_quantized();
  }
  if (value.isList()) { // Tensor[] or Tensor?[], typed or generic
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor() && element.unsafeToTensorImpl()->is_quantized()) {
        return true;
      }
    }
  }
  return false;
}

void throw_no_cpu_kernel(const char* op_name) {
  TORCH_CHECK(
      false,
      op_name,
      " has a QuantizedCPU kernel only: it takes quantized tensors, and this call passed none "
      "(the dispatcher would refuse it for backend CPU too)");
}

} // namespace lightweight_dispatch::generated
