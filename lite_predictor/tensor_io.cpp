#include <lite_predictor/tensor_io.h>

#include <lite_predictor/output_check.h>

#include <ATen/core/dynamic_type.h>
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
#include <sstream>

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

// --- matching arguments to the schema

// forward's arguments after self.
c10::ArrayRef<c10::Argument> arguments_after_self(const c10::FunctionSchema& schema) {
  c10::ArrayRef<c10::Argument> arguments = schema.arguments();
  return !arguments.empty() && arguments[0].name() == "self" ? arguments.slice(1) : arguments;
}

// An argument's declared type as the JIT types it: the lite bytecode's schemas carry DynamicTypes,
// which name as "Dynamic<8>".
c10::TypePtr declared_type(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.type();
  return type->kind() == c10::TypeKind::DynamicType ? type->expectRef<c10::DynamicType>().fallback() : type;
}

// The lite bytecode records None for an argument without a default: that is no default unless the type
// takes None.
std::optional<c10::IValue> default_of(const c10::Argument& argument) {
  const auto& value = argument.default_value();
  if (!value || (value->isNone() && !c10::NoneType::get()->isSubtypeOf(*declared_type(argument)))) {
    return std::nullopt;
  }
  return value;
}

std::string describe_argument(const c10::Argument& argument) {
  std::ostringstream out;
  out << argument.name() << ": " << declared_type(argument)->annotation_str();
  if (const auto value = default_of(argument)) {
    out << " = " << *value;
  }
  return out.str();
}

std::string signature_of(c10::ArrayRef<c10::Argument> arguments) {
  std::string text = "forward(";
  for (size_t i = 0; i < arguments.size(); ++i) {
    text += (i ? ", " : "") + describe_argument(arguments[i]);
  }
  return text + ")";
}

std::string describe_key(const c10::IValue& key) {
  if (key.isString()) {
    return "'" + key.toStringRef() + "'";
  }
  if (key.isInt()) {
    return std::to_string(key.toInt());
  }
  return a_kind(key);
}

// `value` as the declared `type`, rebuilt where the type says more than the file could (list and dict
// element types); `where` places it in the argument for messages ("argument 'sizes' (input 5) element 1").
c10::IValue as_declared(
    const c10::IValue& value, const c10::TypePtr& type, const std::string& where, const c10::Argument& argument) {
  switch (type->kind()) {
    case c10::TypeKind::AnyType:
      return value;
    case c10::TypeKind::OptionalType:
      if (value.isNone()) {
        return value;
      }
      return as_declared(value, type->expectRef<c10::OptionalType>().getElementType(), where, argument);
    case c10::TypeKind::TensorType:
      if (value.isTensor()) {
        return value;
      }
      break;
    case c10::TypeKind::FloatType:
      if (value.isDouble()) {
        return value;
      }
      if (value.isInt()) {
        return static_cast<double>(value.toInt());
      }
      break;
    case c10::TypeKind::ListType: {
      if (!value.isList()) {
        break;
      }
      const c10::TypePtr& element_type = type->expectRef<c10::ListType>().getElementType();
      c10::impl::GenericList list(element_type);
      const auto elements = value.toListRef();
      list.reserve(elements.size());
      for (size_t i = 0; i < elements.size(); ++i) {
        list.push_back(as_declared(elements[i], element_type, where + " element " + std::to_string(i), argument));
      }
      return list;
    }
    case c10::TypeKind::DictType: {
      if (!value.isGenericDict()) {
        break;
      }
      const auto& dict_type = type->expectRef<c10::DictType>();
      c10::impl::GenericDict dict(dict_type.getKeyType(), dict_type.getValueType());
      for (const auto& entry : value.toGenericDict()) {
        const std::string at = where + " key " + describe_key(entry.key());
        dict.insert(
            as_declared(entry.key(), dict_type.getKeyType(), at, argument),
            as_declared(entry.value(), dict_type.getValueType(), at, argument));
      }
      return dict;
    }
    case c10::TypeKind::TupleType: {
      if (!value.isTuple()) {
        break;
      }
      const auto tuple_type = type->expect<c10::TupleType>();
      const auto& elements = value.toTupleRef().elements();
      if (elements.size() != tuple_type->elements().size()) {
        throw ArgumentError(
            where + " is a tuple of " + std::to_string(elements.size()) + ", but the model's forward declares " +
            describe_argument(argument));
      }
      std::vector<c10::IValue> converted;
      for (size_t i = 0; i < elements.size(); ++i) {
        converted.push_back(
            as_declared(elements[i], tuple_type->elements()[i], where + " element " + std::to_string(i), argument));
      }
      return tuple_type->schema() ? c10::ivalue::Tuple::createNamed(std::move(converted), tuple_type)
                                  : c10::ivalue::Tuple::create(std::move(converted));
    }
    default:
      if (value.type()->isSubtypeOf(*type)) {
        return value;
      }
  }
  throw ArgumentError(where + " is " + a_kind(value) + ", but the model's forward declares " + describe_argument(argument));
}

std::optional<std::string> tensor_mismatch_at(const c10::IValue& given, const c10::IValue& example, const std::string& where) {
  if (given.isTensor() && example.isTensor()) {
    const at::Tensor& g = given.toTensor();
    const at::Tensor& e = example.toTensor();
    if (g.scalar_type() != e.scalar_type() || g.dim() != e.dim()) {
      return where + " is " + describe_tensor(g) + ", but the model was exported with " + describe_tensor(e);
    }
    return std::nullopt;
  }
  if ((given.isList() && example.isList()) || (given.isTuple() && example.isTuple())) {
    const std::vector<c10::IValue> g = elements_of(given);
    const std::vector<c10::IValue> e = elements_of(example);
    for (size_t i = 0; i < std::min(g.size(), e.size()); ++i) {
      if (auto mismatch = tensor_mismatch_at(g[i], e[i], where + " element " + std::to_string(i))) {
        return mismatch;
      }
    }
  } else if (given.isGenericDict() && example.isGenericDict()) {
    const c10::impl::GenericDict examples = example.toGenericDict();
    for (const auto& entry : given.toGenericDict()) {
      const auto found = examples.find(entry.key());
      if (found != examples.end()) {
        if (auto mismatch = tensor_mismatch_at(entry.value(), found->value(), where + " key " + describe_key(entry.key()))) {
          return mismatch;
        }
      }
    }
  }
  return std::nullopt;
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

std::vector<c10::IValue> bind_arguments(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& given) {
  const c10::ArrayRef<c10::Argument> arguments = arguments_after_self(schema);
  if (given.size() > arguments.size()) {
    throw ArgumentError(
        "the model's forward takes " + std::to_string(arguments.size()) + " input(s), the file has " +
        std::to_string(given.size()) + ": " + signature_of(arguments));
  }
  std::vector<c10::IValue> bound;
  bound.reserve(arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::Argument& argument = arguments[i];
    if (i < given.size()) {
      const std::string where = "argument '" + argument.name() + "' (input " + std::to_string(i) + ")";
      bound.push_back(as_declared(given[i], declared_type(argument), where, argument));
    } else if (const auto value = default_of(argument)) {
      bound.push_back(*value);
    } else {
      throw ArgumentError(
          "the model's forward needs argument '" + argument.name() + "' (" + declared_type(argument)->annotation_str() +
          "), which the inputs file does not give and which has no default: " + signature_of(arguments));
    }
  }
  return bound;
}

std::string forward_signature(const c10::FunctionSchema& schema) {
  return signature_of(arguments_after_self(schema));
}

std::optional<std::string> first_tensor_mismatch(
    const c10::FunctionSchema* schema, const std::vector<c10::IValue>& given, const std::vector<c10::IValue>& example) {
  const c10::ArrayRef<c10::Argument> arguments = schema ? arguments_after_self(*schema) : c10::ArrayRef<c10::Argument>();
  for (size_t i = 0; i < std::min(given.size(), example.size()); ++i) {
    if (auto mismatch = tensor_mismatch_at(given[i], example[i], "input " + std::to_string(i))) {
      return i < arguments.size() ? *mismatch + " for argument '" + arguments[i].name() + "'" : *mismatch;
    }
  }
  return std::nullopt;
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
