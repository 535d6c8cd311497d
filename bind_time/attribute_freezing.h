// Bind-time freezing: a model saved without torch.jit.freeze reads its weights with GET_ATTR on every run, and
// keeps `if self.training:` branches and a batch_norm call after each conv. Where no method can change an
// attribute, reading it always gives the same object, so the stage rewrites the bytecode as freezing would have
// written it, before any other rewrite looks at it:
//
//   - an attribute read (LOAD self; GET_ATTR ...) becomes a constant that is that very object (LOADC): the same
//     tensor, so nothing a run sees changes, only where the reference comes from;
//   - a register that only ever holds such a constant is read as the constant, and the stores no read needs are
//     dropped;
//   - a branch on a constant bool (self.training) becomes a jump or nothing, and code no path reaches is removed;
//   - a list of number constants built for an operator's int[] / float[] argument (a conv's stride) becomes one
//     constant list, where the operator alone receives it;
//   - batch_norm in inference (training a constant false, running statistics constant) right after a conv2d
//     with constant weights is folded into that conv's weight and bias (new constants), once per conv and batch
//     norm: methods that inline the same submodules share the folded weights. Once the rewrite stands, a folded
//     weight is written over the loaded one where nothing else can read that (no GET_ATTR is left, no constant
//     shares its memory, no other fold starts from it), so the model holds one copy of its conv weights and the
//     load faults in no fresh pages for them; elsewhere beside it.
//
// When it applies: no instruction a caller's run can reach assigns an attribute (SET_ATTR) or calls another
// function (CALL, INTERFACE_CALL, which could receive a module), and after the rewrite no function of the model
// may write a constant or anything sharing its memory (folded_values.h's trace). What a run can reach is the
// model's own methods (Model::run_method runs no other): a submodule's method that nothing calls, such as the
// __setstate__ every quantized conv carries, ran in the loader, before binding, and never runs again. Otherwise
// every function keeps its bytecode, and the report says why.
//
// LIGHTWEIGHT_DISPATCH_PRINT_FROZEN_BYTECODE=1 prints each rewritten function's bytecode to stderr, for a person
// finding out why a site was not taken or a check not resolved.
#pragma once

#include <lightweight_dispatch/bind_time_report.h>
#include <runtime/op_binding.h>

#include <torch/csrc/jit/mobile/module.h>

namespace lightweight_dispatch {

// Rewrites the module's functions in place (all of them, or none); call after binding, before the other
// rewrites of the stage.
AttributeFreezingReport freeze_attributes(torch::jit::mobile::Module& module, const OperatorSchema& schema_of);

} // namespace lightweight_dispatch
