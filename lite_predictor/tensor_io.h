// Values in and out of lite_predictor: forward's arguments and the references read from torch.save
// files, and the outputs flattened for comparison or saved for torch.load. forward_arguments.h matches
// the arguments to forward's schema.
#pragma once

#include <ATen/core/ivalue.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lightweight_dispatch {

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

// "a list", "an int": a value's kind as Python names it, for messages.
std::string a_kind(const c10::IValue& value);

// The elements of a list or tuple.
std::vector<c10::IValue> elements_of(const c10::IValue& value);

} // namespace lightweight_dispatch
