#include <lite_predictor/tensor_io.h>

#include <ATen/ops/scalar_tensor.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdio>
#include <fstream>
#include <iterator>

namespace lightweight_dispatch {

namespace {

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw TensorFileError(path + ": cannot open the file");
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty()) {
    throw TensorFileError(path + ": the file is empty");
  }
  return bytes;
}

void append_flattened(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) {
    out.push_back(value.toTensor());
  } else if (value.isTuple()) {
    for (const auto& element : value.toTupleRef().elements()) {
      append_flattened(element, out);
    }
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      append_flattened(element, out);
    }
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      append_flattened(entry.value(), out);
    }
  } else if (value.isInt()) {
    out.push_back(at::scalar_tensor(value.toInt(), at::kLong));
  } else if (value.isDouble()) {
    out.push_back(at::scalar_tensor(value.toDouble(), at::kDouble));
  } else if (value.isBool()) {
    out.push_back(at::scalar_tensor(value.toBool(), at::kBool));
  } else if (!value.isNone()) {
    throw std::runtime_error("cannot compare a model output of type " + value.tagKind());
  }
}

} // namespace

std::vector<at::Tensor> load_tensor_list(const std::string& path) {
  const std::vector<char> bytes = read_file(path);
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const std::exception& error) {
    throw TensorFileError(path + ": not a torch.save file of tensors (" + std::string(error.what()) + ")");
  }
  if (value.isTensor()) {
    return {value.toTensor()};
  }
  std::vector<c10::IValue> elements;
  if (value.isList()) {
    elements = value.toListRef().vec();
  } else if (value.isTuple()) {
    const auto& tuple = value.toTupleRef().elements();
    elements.assign(tuple.begin(), tuple.end());
  } else {
    throw TensorFileError(path + ": expected a list of tensors, found " + value.tagKind());
  }
  std::vector<at::Tensor> tensors;
  for (size_t i = 0; i < elements.size(); ++i) {
    if (!elements[i].isTensor()) {
      throw TensorFileError(
          path + ": element " + std::to_string(i) + " is a " + elements[i].tagKind() + ", not a tensor");
    }
    tensors.push_back(elements[i].toTensor());
  }
  return tensors;
}

void save_tensor_list(const std::string& path, const std::vector<at::Tensor>& tensors) {
  // A tuple: the JIT pickler tags lists with JIT-only globals (build_tensorlist, restore_type_tag)
  // that torch.load's default weights_only mode refuses; a tuple of tensors loads everywhere.
  std::vector<c10::IValue> elements(tensors.begin(), tensors.end());
  const std::vector<char> bytes = torch::jit::pickle_save(c10::ivalue::Tuple::create(std::move(elements)));
  const std::string tmp_path = path + ".tmp";
  {
    std::ofstream out(tmp_path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::remove(tmp_path.c_str());
      throw TensorFileError(path + ": cannot write the file");
    }
  }
  if (std::rename(tmp_path.c_str(), path.c_str()) != 0) {
    std::remove(tmp_path.c_str());
    throw TensorFileError(path + ": cannot replace the file");
  }
}

std::vector<at::Tensor> flatten_outputs(const c10::IValue& output) {
  std::vector<at::Tensor> tensors;
  append_flattened(output, tensors);
  return tensors;
}

} // namespace lightweight_dispatch
