// What the bind-time stage may assume about an operator when it proves a rewrite safe, taken from the operator's
// schema and the dispatcher's registration (native_functions.yaml's tags and kernels), never from its name.
//
// Every rewrite rests on three questions about each call it traces past: does the same call always give the
// same result (a fold remembers it; a preparation run repeats it), what may its results share memory with (a
// remembered or reordered tensor must not be reached by a later write), and what may it write. Where the
// registration does not answer a question, the answer is the unsafe one.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <optional>

#include <string>

namespace lightweight_dispatch {

struct OperatorFacts {
  // The same arguments always give the same results: false for an operator tagged nondeterministic_seeded
  // (rand, randn, dropout, bernoulli, the in-place uniform_/normal_/exponential_ ...), one taking a Generator,
  // one of a namespace whose operators the project does not know, and one that acts outside its results.
  bool deterministic = true;
  // It exists for an effect outside its results (prim::Print, aten::warn, aten::manual_seed): it returns
  // nothing and writes none of its arguments. A second, hidden run of the model would repeat the effect.
  bool acts_outside = false;
  // Its schema's alias annotations may not tell the whole truth: tagged maybe_aliasing_or_mutating (dropout,
  // batch_norm). Such an operator may write, and its results may share memory with, any argument.
  bool may_alias_or_write_anything = false;
  // Its results may be one of its tensor arguments or a view of one although the schema declares no alias: a
  // CompositeImplicitAutograd operator runs other operators and may return what they return (type_as returns
  // self when the dtype already matches). conv2d and linear, which always compute a new tensor, are not.
  bool may_return_argument = false;
  // Why `deterministic` is false, for a report: "is tagged nondeterministic_seeded".
  std::string nondeterministic_because;
};

// The facts about the operator `schema` describes (an operator of the c10 dispatcher, or one TorchScript's
// interpreter implements, whose schema is all there is).
OperatorFacts operator_facts(const c10::FunctionSchema& schema);

// A nondeterministic_seeded operator that draws no random number when one argument has a given constant value:
// scaled_dot_product_attention with dropout_p 0.0 (what a traced or eval transformer passes; its only use of
// the generator, and a test checks it on the installed torch: the global generator's state is unchanged across
// the call). An inference dropout needs no entry: freezing (torch.jit.freeze's or the stage's) removes it.
struct DrawsNothingWhen {
  std::string argument; // the argument's name in the schema
  c10::IValue value;    // the constant that makes the call draw nothing
};
std::optional<DrawsNothingWhen> draws_nothing_when(const c10::FunctionSchema& schema);

// Whether the call's `index`-th argument may be written: annotated as written (an in-place or out= operator), or
// the operator may write anything.
bool may_write_argument(const c10::FunctionSchema& schema, const OperatorFacts& facts, size_t index);

// Whether writing an argument of this type writes only the container, never tensor data: a generic list (t[]:
// append, insert, _set_item) or a dict. A Tensor[] written (an out= list) writes its tensors.
bool writes_only_the_container(const c10::TypePtr& type);

// Whether a value of this type can never be written: a number, bool, string, device, dtype, None, or an optional
// one. Writing "such an argument" (an operator that may write anything) writes nothing there.
bool is_immutable_value(const c10::TypePtr& type);

// Whether a value of this type may be or hold a tensor: not an immutable value, nor a list or optional of them
// (an int[]). A result cannot share memory with an argument that cannot.
bool can_hold_tensor(const c10::TypePtr& type);

// Whether a result of the operator may share memory with one of its arguments: declared as an alias, a result
// that holds other values (a list, tuple, dict, optional or any type: what it holds may be an argument, as
// prim::TupleIndex's and aten::list's results are), or an operator whose facts say so.
bool result_may_alias_arguments(const c10::FunctionSchema& schema, const OperatorFacts& facts, size_t result);

} // namespace lightweight_dispatch
