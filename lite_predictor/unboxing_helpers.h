// Small conversions the generated unboxing functions share. Included by every generated shard, so it
// stays light: IValue and the stack only, no operator headers.
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/DimVector.h>

#include <optional>
#include <vector>

namespace lightweight_dispatch::generated {

// `int[]?`: None, or the list's values held in storage that outlives the kernel call.
inline std::optional<at::DimVector> optional_dim_vector(const c10::IValue& value) {
  if (value.isNone()) {
    return std::nullopt;
  }
  return value.toDimVector();
}

// A view of optional storage, as kernels taking `int[]?` or `float[]?` expect it.
template <typename Storage>
std::optional<c10::ArrayRef<typename Storage::value_type>> optional_array_ref(
    const std::optional<Storage>& storage) {
  if (!storage) {
    return std::nullopt;
  }
  return c10::ArrayRef<typename Storage::value_type>(*storage);
}

// `Tensor?[]`: the interpreter may build the list with a generic element type (a TorchScript
// List[Optional[Tensor]] literal), which IValue::toOptionalTensorList() rejects; convert those.
inline c10::List<std::optional<at::Tensor>> optional_tensor_list(const c10::IValue& value) {
  if (value.isOptionalTensorList()) {
    return value.toOptionalTensorList();
  }
  c10::List<std::optional<at::Tensor>> list;
  for (const c10::IValue& element : value.toListRef()) {
    list.push_back(element.toOptional<at::Tensor>());
  }
  return list;
}

} // namespace lightweight_dispatch::generated
