#include <lightweight_dispatch/values.h>
#include <runtime/value_kinds.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace lightweight_dispatch {

namespace {

// --- reading torch.save files

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

// The value a torch.save file holds. `what` says what it should hold, for the messages.
c10::IValue read_saved_value(const std::string& path, const std::string& what) {
  const std::vector<char> bytes = read_file(path);
  if (bytes.size() < 4 || std::memcmp(bytes.data(), "PK\x03\x04", 4) != 0) {
    // torch.save's legacy format (_use_new_zipfile_serialization=False), which LibTorch cannot read, or
    // not a torch.save file at all.
    throw TensorFileError(
        path + ": not a torch.save file of " + what +
        " (not a zip archive; torch.save writes one unless _use_new_zipfile_serialization=False)");
  }
  try {
    return torch::jit::pickle_load(bytes);
  } catch (const std::exception& error) {
    throw TensorFileError(path + ": not a torch.save file of " + what + " (" + std::string(error.what()) + ")");
  }
}

// --- outputs

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
  } else if (value.isString()) {
    const std::string& text = value.toStringRef();
    at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
    std::memcpy(bytes.data_ptr(), text.data(), text.size());
    out.push_back(bytes);
  } else if (!value.isNone()) {
    throw std::runtime_error("cannot compare a model output of type " + value.type()->annotation_str());
  }
}

// `value` with every list as List[Any] and every named tuple as a plain tuple: what the JIT pickler,
// without type tags, writes as plain Python lists and tuples. Typed lists would be written through
// torch.jit._pickle's build_*list functions, which torch.load's weights_only mode refuses.
c10::IValue as_plain_python(const c10::IValue& value) {
  if (value.isList()) {
    c10::impl::GenericList list(c10::AnyType::get());
    for (const c10::IValue& element : value.toListRef()) {
      list.push_back(as_plain_python(element));
    }
    return list;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      elements.push_back(as_plain_python(element));
    }
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  if (value.isGenericDict()) {
    const c10::impl::GenericDict source = value.toGenericDict();
    c10::impl::GenericDict dict(source.keyType(), c10::AnyType::get());
    for (const auto& entry : source) {
      dict.insert(entry.key(), as_plain_python(entry.value()));
    }
    return dict;
  }
  return value;
}

// torch.save's zip format, like torch::jit::pickle_save but without the type tags (restore_type_tag)
// that pickle_save adds to every list and dict and torch.load's weights_only mode refuses.
std::vector<char> torch_save_bytes(const c10::IValue& value) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); },
      /*tensor_table=*/nullptr,
      /*type_renamer=*/nullptr,
      /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr,
      /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(as_plain_python(value));
  pickler.stop();
  std::vector<char> archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    archive.insert(archive.end(), bytes, bytes + size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return archive;
}

} // namespace

// "a list", "an int": a value's kind as Python names it, for messages.
std::string a_kind(const c10::IValue& value) {
  if (value.isTensor()) {
    return "a Tensor";
  }
  if (value.isNone()) {
    return "None";
  }
  if (value.isInt()) {
    return "an int";
  }
  if (value.isDouble()) {
    return "a float";
  }
  if (value.isBool()) {
    return "a bool";
  }
  if (value.isString()) {
    return "a str";
  }
  if (value.isList()) {
    return "a list";
  }
  if (value.isTuple()) {
    return "a tuple";
  }
  if (value.isGenericDict()) {
    return "a dict";
  }
  return "a " + value.type()->annotation_str();
}

// The elements of a file's top-level list or tuple.
std::vector<c10::IValue> elements_of(const c10::IValue& value) {
  if (value.isList()) {
    return value.toListRef().vec();
  }
  const auto& tuple = value.toTupleRef().elements();
  return std::vector<c10::IValue>(tuple.begin(), tuple.end());
}

std::vector<c10::IValue> load_argument_list(const std::string& path) {
  const c10::IValue value = read_saved_value(path, "forward's arguments");
  if (value.isTensor()) {
    return {value};
  }
  if (!value.isList() && !value.isTuple()) {
    throw TensorFileError(path + ": expected a list or tuple of forward's arguments, found " + a_kind(value));
  }
  return elements_of(value);
}

std::vector<at::Tensor> load_tensor_list(const std::string& path) {
  const c10::IValue value = read_saved_value(path, "tensors");
  if (value.isTensor()) {
    return {value.toTensor()};
  }
  if (!value.isList() && !value.isTuple()) {
    throw TensorFileError(path + ": expected a list of tensors, found " + value.tagKind());
  }
  const std::vector<c10::IValue> elements = elements_of(value);
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

void save_value(const std::string& path, const c10::IValue& value) {
  const std::vector<char> bytes = torch_save_bytes(value);
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
