#include <runtime/tensor_tree.h>

namespace lightweight_dispatch {

c10::IValue map_tensors(c10::IValue value, const std::function<at::Tensor(const at::Tensor&)>& change) {
  if (value.isTensor()) {
    return change(value.toTensor());
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      elements.push_back(map_tensors(element, change));
    }
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  if (value.isList()) {
    const auto list = value.toList();
    c10::impl::GenericList rebuilt(list.elementType());
    for (const c10::IValue& element : list.vec()) {
      rebuilt.push_back(map_tensors(element, change));
    }
    return rebuilt;
  }
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict rebuilt(dict.keyType(), dict.valueType());
    for (const auto& entry : dict) {
      rebuilt.insert(entry.key(), map_tensors(entry.value(), change));
    }
    return rebuilt;
  }
  return value;
}

void for_each_tensor(const c10::IValue& value, const std::function<void(const at::Tensor&)>& visit) {
  if (value.isTensor()) {
    visit(value.toTensor());
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      for_each_tensor(element, visit);
    }
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      for_each_tensor(element, visit);
    }
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      for_each_tensor(entry.value(), visit);
    }
  }
}

std::vector<c10::IValue> deep_copies(const std::vector<c10::IValue>& values) {
  std::vector<c10::IValue> copies;
  copies.reserve(values.size());
  for (const c10::IValue& value : values) {
    copies.push_back(value.deepcopy());
  }
  return copies;
}

} // namespace lightweight_dispatch
