// Values in and out of a model, as lite_predictor handles them: forward's arguments and reference outputs read
// from torch.save files and matched to forward's schema, outputs flattened, compared and saved for torch.load.
// Public, for apps and tools around the runtime (runtime.h's load_inputs uses it).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lightweight_dispatch {

// --- torch.save files

// A file that cannot be read or does not hold what it should (a list of arguments, a list of tensors).
class TensorFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads forward's arguments from a file written by Python's `torch.save([a0, a1, ...])` (a list or
// tuple; a single tensor is one argument). Each may be anything torch.save stores that TorchScript has
// a type for: tensors, ints, floats, bools, strings, None, and lists, tuples and dicts of them. Lists
// and dicts come back untyped (List[Any]); bind_arguments gives them forward's declared types.
std::vector<c10::IValue> load_argument_list(const std::string& path);

// Reads a file written by Python's `torch.save([t0, t1, ...])` (a tuple or a single tensor also works):
// the reference outputs, flattened.
std::vector<at::Tensor> load_tensor_list(const std::string& path);

// Writes `value` so that Python's `torch.load` (weights_only, its default) returns the same structure:
// tensors, numbers, strings and None as themselves, lists as lists, dicts as dicts, tuples (named ones
// too, without their names) as tuples. Written to a temporary file and renamed, so a failure leaves any
// previous file intact.
void save_value(const std::string& path, const c10::IValue& value);

// A model's output as a flat list of tensors, depth first in order: a tuple's (or named tuple's) and a
// list's elements in order, a dict's values in its order (keys are not compared); ints, floats and bools
// become 0-dim int64, float64 and bool tensors, a string a 1-dim uint8 tensor of its UTF-8 bytes, and
// None nothing. Throws for any other value (an object, a device). This mirrors `flatten_outputs` in
// scripts/dump_ops.py, which writes the expected outputs.
std::vector<at::Tensor> flatten_outputs(const c10::IValue& output);

// --- forward's arguments: types checked and rebuilt as declared, omitted trailing arguments filled from their
// defaults, tensors compared with the example inputs the model was exported with

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

// --- comparing outputs with reference outputs

struct Comparison {
  bool fits = true; // same count, dtypes and shapes: otherwise the reference is not for this model
  bool match = false;
  double max_abs_diff = 0.0;
  std::string mismatch; // empty when the outputs match: otherwise the first difference, in words
};

// Same count, and each pair with the same dtype and shape and |a - e| <= atol + rtol * |e| elementwise.
// NaNs match NaNs in the same places.
Comparison compare_outputs(
    const std::vector<at::Tensor>& actual,
    const std::vector<at::Tensor>& expected,
    double atol,
    double rtol);

// "Float[3, 4]": a tensor's dtype and shape, as messages show them.
std::string describe_tensor(const at::Tensor& t);

// Same count, dtypes, shapes and bytes.
bool identical_outputs(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b);

// --- messages

// The first line of an error message, with bytes a terminal cannot show replaced by '?': damaged files put
// raw bytes into LibTorch's messages.
std::string printable_first_line(const std::string& text);

} // namespace lightweight_dispatch
