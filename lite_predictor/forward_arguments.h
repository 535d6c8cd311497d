// forward's arguments from an inputs file, matched against forward's schema: types checked and rebuilt
// as declared, omitted trailing arguments filled from their defaults, tensors compared with the example
// inputs the model was exported with.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lightweight_dispatch {

// Arguments that do not fit forward's schema: too many, one missing, or one of the wrong type. The
// message names the argument.
class ArgumentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// forward's complete argument list (without self) from the `given` leading ones: each converted to its
// declared type (lists and dicts retyped element by element, an int where a float is declared becomes
// that float, as TorchScript converts it), the trailing ones the file omits taken from the schema's
// defaults. Throws ArgumentError naming the argument when there are too many, one without a default is
// missing, or one's type does not fit. The lite bytecode records None as the default of an argument
// that has none, so a missing argument whose type accepts None gets None, as the stock runtime does.
std::vector<c10::IValue> bind_arguments(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& given);

// "forward(x: Tensor, steps: int = 3)": forward's arguments after self, with their declared types and
// defaults, for messages.
std::string forward_signature(const c10::FunctionSchema& schema);

// The first tensor in `given` whose dtype or rank differs from the tensor at the same place in
// `example` (the same argument, list index or dict key), in words: "input 0 is Double[3, 4], but the
// model was exported with Float[3, 4] for argument 'x'". Places only one of them has are not compared.
// `schema` names the arguments; null (bytecode without a schema) names none.
std::optional<std::string> first_tensor_mismatch(
    const c10::FunctionSchema* schema, const std::vector<c10::IValue>& given, const std::vector<c10::IValue>& example);

} // namespace lightweight_dispatch
