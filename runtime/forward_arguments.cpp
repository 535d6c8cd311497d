#include <lightweight_dispatch/values.h>
#include <runtime/value_kinds.h>


#include <ATen/core/dynamic_type.h>

#include <sstream>

namespace lightweight_dispatch {

namespace {

// An argument's declared type as the JIT types it: the lite bytecode's schemas carry DynamicTypes,
// which name as "Dynamic<8>".
c10::TypePtr declared_type(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.type();
  return type->kind() == c10::TypeKind::DynamicType ? type->expectRef<c10::DynamicType>().fallback() : type;
}

// forward's arguments after self: the module object, whatever the model's code named it (`def forward(m, x)`
// is a method too).
c10::ArrayRef<c10::Argument> arguments_after_self(const c10::FunctionSchema& schema) {
  c10::ArrayRef<c10::Argument> arguments = schema.arguments();
  const bool first_is_module = !arguments.empty() && (arguments[0].name() == "self" ||
                                                      declared_type(arguments[0])->kind() == c10::TypeKind::ClassType);
  return first_is_module ? arguments.slice(1) : arguments;
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

std::string signature_of(c10::ArrayRef<c10::Argument> arguments, const std::string& method = "forward") {
  std::string text = method + "(";
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

} // namespace

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
  return signature_of(arguments_after_self(schema), schema.name().empty() ? "forward" : schema.name());
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

} // namespace lightweight_dispatch
