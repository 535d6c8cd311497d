// Conversions the generated unboxing functions share. Included by every generated shard, so it stays
// light: IValue and the stack only, no operator headers.
//
// Most are declared here and defined once, in unboxing_helpers.cpp: IValue's own accessors (toInt,
// toScalar, toDimVector, ...) are inline and carry their type-error paths with them, and the IValue
// constructors for scalars and tensor lists are large; inlined into every unboxing function of every
// shard, they were most of the generated code's size. Tensor arguments keep the inline toTensor(): it
// is small and on every call's path.
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/DimVector.h>

#include <optional>
#include <string_view>
#include <vector>

namespace lightweight_dispatch::generated {

// --- arguments: `args[i]` to the C++ value a kernel takes
int64_t to_int(const c10::IValue& value);
double to_double(const c10::IValue& value);
bool to_bool(const c10::IValue& value);
at::Scalar to_scalar(const c10::IValue& value);
at::ScalarType to_scalar_type(const c10::IValue& value);
at::Layout to_layout(const c10::IValue& value);
at::Device to_device(const c10::IValue& value);
at::MemoryFormat to_memory_format(const c10::IValue& value);
std::string_view to_string_view(const c10::IValue& value);

at::DimVector to_dim_vector(const c10::IValue& value);              // int[]
std::vector<double> to_double_vector(const c10::IValue& value);     // float[]
std::vector<at::Tensor> to_tensor_vector(const c10::IValue& value); // Tensor[] as TensorList
c10::List<at::Tensor> to_tensor_list(const c10::IValue& value);     // Tensor[] as ITensorListRef

std::optional<at::Tensor> to_optional_tensor(const c10::IValue& value);
std::optional<int64_t> to_optional_int(const c10::IValue& value);
std::optional<double> to_optional_double(const c10::IValue& value);
std::optional<bool> to_optional_bool(const c10::IValue& value);
std::optional<at::Scalar> to_optional_scalar(const c10::IValue& value);
std::optional<at::ScalarType> to_optional_scalar_type(const c10::IValue& value);
std::optional<at::Layout> to_optional_layout(const c10::IValue& value);
std::optional<at::Device> to_optional_device(const c10::IValue& value);
std::optional<at::MemoryFormat> to_optional_memory_format(const c10::IValue& value);
std::optional<std::string_view> to_optional_string_view(const c10::IValue& value);

// `int[]?`: None, or the list's values held in storage that outlives the kernel call.
std::optional<at::DimVector> optional_dim_vector(const c10::IValue& value);
// `float[]?`, likewise.
std::optional<std::vector<double>> optional_double_vector(const c10::IValue& value);

// A view of optional storage, as kernels taking `int[]?` or `float[]?` expect it.
template <typename Storage>
std::optional<c10::ArrayRef<typename Storage::value_type>> optional_array_ref(const std::optional<Storage>& storage) {
  if (!storage) {
    return std::nullopt;
  }
  return c10::ArrayRef<typename Storage::value_type>(*storage);
}

// `Tensor?[]`: the interpreter may build the list with a generic element type (a TorchScript
// List[Optional[Tensor]] literal), which IValue::toOptionalTensorList() rejects; convert those.
c10::List<std::optional<at::Tensor>> optional_tensor_list(const c10::IValue& value);

// --- backend choice (STATIC_DISPATCH_BACKEND with QuantizedCPU)

// Whether a `Tensor?`, `Tensor[]` or `Tensor?[]` argument holds a quantized tensor.
bool holds_quantized_tensor(const c10::IValue& value);

// The error the dispatcher gives for an operator with no CPU kernel called on CPU tensors.
[[noreturn]] void throw_no_cpu_kernel(const char* op_name);

// --- results. The result is taken by value, so a kernel returning a reference to one of its arguments
// (in-place and out= kernels) has it copied before the arguments leave the stack.

// Drop the `count` arguments from the top of the stack.
void drop_arguments(torch::jit::Stack& stack, size_t count);

// Push one result. Only tensors and tensor lists have their own overloads: a scalar-like result (bool,
// int, double, Scalar, ...) goes through IValue, which every such type converts to, so no call is ambiguous.
void push_result(torch::jit::Stack& stack, at::Tensor result);
void push_result(torch::jit::Stack& stack, std::vector<at::Tensor> result);
void push_result(torch::jit::Stack& stack, c10::IValue result); // every other boxable type

// A Scalar result as an IValue, out of line: IValue's constructor from Scalar is large.
c10::IValue box_scalar(const at::Scalar& result);

// Drop the `count` arguments, then push the result in their place.
void replace_arguments(torch::jit::Stack& stack, size_t count, at::Tensor result);
void replace_arguments(torch::jit::Stack& stack, size_t count, std::vector<at::Tensor> result);
void replace_arguments(torch::jit::Stack& stack, size_t count, c10::IValue result);

} // namespace lightweight_dispatch::generated
