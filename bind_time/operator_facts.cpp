#include <bind_time/operator_facts.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/enum_tag.h>

#include <optional>
#include <set>

namespace lightweight_dispatch {

namespace {

// Namespaces whose every operator the project knows to be deterministic unless its registration says otherwise:
// ATen's (tagged in native_functions.yaml), TorchScript's own, and those custom_ops.yaml and quantized_ops.yaml
// generate kernels for (torchvision's detection operators, the quantized kernels).
bool namespace_is_known(const std::string& name) {
  static const std::set<std::string> known = {"aten", "prim", "quantized", "torchvision"};
  const auto colons = name.find("::");
  return colons != std::string::npos && known.count(name.substr(0, colons)) != 0;
}

// CompositeImplicitAutograd operators whose implementation always computes a new tensor (a convolution or a
// matrix product into fresh memory): their results alias nothing.
bool always_computes_new_tensor(const std::string& name) {
  static const std::set<std::string> fresh = {"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::linear"};
  return fresh.count(name) != 0;
}

// A Generator, or a type holding one (Generator?): walked, not printed (printing every argument's type was a
// tenth of an unfrozen model's bind time).
bool holds_generator(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) {
    return true;
  }
  for (const c10::TypePtr& contained : type->containedTypes()) {
    if (holds_generator(contained)) {
      return true;
    }
  }
  return false;
}

bool takes_generator(const c10::FunctionSchema& schema) {
  for (const c10::Argument& argument : schema.arguments()) {
    if (holds_generator(argument.type())) {
      return true;
    }
  }
  return false;
}

bool writes_any_argument(const c10::FunctionSchema& schema) {
  for (const c10::Argument& argument : schema.arguments()) {
    if (argument.alias_info() != nullptr && argument.alias_info()->isWrite()) {
      return true;
    }
  }
  return false;
}

// A value that holds no other value: what it is cannot be an argument or part of one.
bool holds_nothing(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::ComplexType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::NumberType:
    case c10::TypeKind::StringType:
    case c10::TypeKind::NoneType:
    case c10::TypeKind::DeviceObjType:
    case c10::TypeKind::ScalarTypeType:
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::MemoryFormatType:
      return true;
    default:
      return false; // lists, tuples, dicts, optionals, Any, type variables: they may hold an argument
  }
}

} // namespace

OperatorFacts operator_facts(const c10::FunctionSchema& schema) {
  OperatorFacts facts;
  const std::string& name = schema.name();
  const std::optional<c10::OperatorHandle> registered = c10::Dispatcher::singleton().findOp(schema.operator_name());
  if (registered) {
    facts.may_alias_or_write_anything = registered->hasTag(at::Tag::maybe_aliasing_or_mutating);
    facts.may_return_argument = registered->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
                                !always_computes_new_tensor(name);
  }
  facts.acts_outside = schema.returns().empty() && !writes_any_argument(schema);
  if (registered && registered->hasTag(at::Tag::nondeterministic_seeded)) {
    facts.nondeterministic_because = "is tagged nondeterministic_seeded";
  } else if (takes_generator(schema)) {
    facts.nondeterministic_because = "takes a Generator";
  } else if (!namespace_is_known(name)) {
    facts.nondeterministic_because = "is of a namespace whose operators the project does not know";
  } else if (facts.acts_outside) {
    facts.nondeterministic_because = "returns nothing: it acts outside its results";
  }
  facts.deterministic = facts.nondeterministic_because.empty();
  return facts;
}

std::optional<DrawsNothingWhen> draws_nothing_when(const c10::FunctionSchema& schema) {
  if (schema.name() == "aten::scaled_dot_product_attention" && schema.overload_name().empty() &&
      schema.argumentIndexWithName("dropout_p").has_value()) {
    return DrawsNothingWhen{"dropout_p", c10::IValue(0.0)};
  }
  return std::nullopt;
}

bool may_write_argument(const c10::FunctionSchema& schema, const OperatorFacts& facts, size_t index) {
  if (facts.may_alias_or_write_anything) {
    return true;
  }
  if (index >= schema.arguments().size()) {
    return !schema.is_vararg(); // a vararg operator's extra arguments are read only
  }
  const c10::AliasInfo* alias = schema.arguments()[index].alias_info();
  return alias != nullptr && alias->isWrite();
}

bool writes_only_the_container(const c10::TypePtr& type) {
  return type->kind() == c10::TypeKind::DictType ||
         (type->kind() == c10::TypeKind::ListType && type->containedType(0)->kind() != c10::TypeKind::TensorType);
}

bool is_immutable_value(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::StringType:
    case c10::TypeKind::NumberType:
    case c10::TypeKind::DeviceObjType:
    case c10::TypeKind::NoneType:
    case c10::TypeKind::ScalarTypeType:
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::MemoryFormatType:
      return true;
    case c10::TypeKind::OptionalType:
      return is_immutable_value(type->containedType(0));
    default:
      return false;
  }
}

bool can_hold_tensor(const c10::TypePtr& type) {
  if (is_immutable_value(type)) {
    return false;
  }
  if (type->kind() == c10::TypeKind::ListType || type->kind() == c10::TypeKind::OptionalType) {
    return can_hold_tensor(type->containedType(0));
  }
  return true;
}

bool result_may_alias_arguments(const c10::FunctionSchema& schema, const OperatorFacts& facts, size_t result) {
  if (facts.may_alias_or_write_anything || facts.may_return_argument) {
    return true;
  }
  if (result >= schema.returns().size()) {
    return true;
  }
  const c10::Argument& declared = schema.returns()[result];
  return declared.alias_info() != nullptr || !holds_nothing(declared.type());
}

} // namespace lightweight_dispatch
