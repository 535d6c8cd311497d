#include <runtime/model_integrity.h>

#include <torch/csrc/jit/mobile/function.h>

#include <sstream>
#include <string>

namespace lightweight_dispatch {

namespace {

// Bytes from the storage's start to one past the tensor's last element, or -1 if the layout is invalid.
int64_t required_bytes(const at::Tensor& tensor) {
  if (tensor.numel() == 0) {
    return 0;
  }
  int64_t last = tensor.storage_offset();
  if (last < 0) {
    return -1;
  }
  for (int64_t dim = 0; dim < tensor.dim(); ++dim) {
    if (tensor.stride(dim) < 0) {
      return -1;
    }
    last += (tensor.size(dim) - 1) * tensor.stride(dim);
  }
  return (last + 1) * static_cast<int64_t>(tensor.element_size());
}

void check_tensor(const at::Tensor& tensor, const std::string& where) {
  if (!tensor.defined() || !tensor.has_storage() || tensor.is_meta()) {
    return;
  }
  const int64_t needed = required_bytes(tensor);
  const auto available = static_cast<int64_t>(tensor.storage().nbytes());
  if (needed < 0 || needed > available) {
    std::ostringstream message;
    message << where << " is " << tensor.scalar_type() << tensor.sizes() << " but its stored data has " << available
            << " bytes where " << needed << " are needed: the archive is damaged";
    throw ModelIntegrityError(message.str());
  }
}

void check_value(const c10::IValue& value, const std::string& where, int depth) {
  if (depth > 64) {
    return; // attributes nest shallowly; a deeper structure is not a tensor container worth walking
  }
  if (value.isTensor()) {
    check_tensor(value.toTensor(), where);
  } else if (value.isTuple()) {
    const auto& elements = value.toTupleRef().elements();
    for (size_t i = 0; i < elements.size(); ++i) {
      check_value(elements[i], where + "[" + std::to_string(i) + "]", depth + 1);
    }
  } else if (value.isList()) {
    const auto list = value.toListRef();
    for (size_t i = 0; i < list.size(); ++i) {
      check_value(list[i], where + "[" + std::to_string(i) + "]", depth + 1);
    }
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      check_value(entry.value(), where + "{}", depth + 1);
    }
  } else if (value.isObject()) {
    const auto object = value.toObject();
    const auto& slots = object->slots();
    for (size_t i = 0; i < slots.size(); ++i) {
      const auto& type = object->type();
      const std::string name = i < type->numAttributes() ? type->getAttributeName(i) : std::to_string(i);
      check_value(slots[i], where + "." + name, depth + 1);
    }
  }
}

} // namespace

void check_loaded_tensors(const torch::jit::mobile::Module& module) {
  check_value(c10::IValue(module._ivalue()), "attribute self", 0);
  for (const auto& function : module.compilation_unit().methods()) {
    const auto& constants = function->get_code().constants_;
    for (size_t i = 0; i < constants.size(); ++i) {
      check_value(constants[i], "constant " + std::to_string(i) + " of " + function->qualname().qualifiedName(), 0);
    }
  }
}

} // namespace lightweight_dispatch
