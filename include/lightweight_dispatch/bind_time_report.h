// What the bind-time stage reports, and when it prepares its kernels: the types runtime.h's Model and
// LoadOptions use for it, in a header of their own so that the stage (bind_time/) needs no more of the API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lightweight_dispatch {

// When the bind-time stage (LoadOptions::specialize) compiles and checks a site's kernel for a new input shape.
enum class Preparation {
  // Off the caller's thread: a call meeting a new shape runs the site's generated kernels, and when it returns
  // the model runs once more on a thread of its own, on a copy of that call's inputs, to compile and check every
  // site (Model::wait_for_kernels waits for it). The first calls are as fast as without the stage and return the
  // stock kernels' results; calls after a site's kernel is ready get the compiled kernel's (within 1e-5).
  Background,
  // On the call that meets the shape: that call is slower (MobileNetV2's first run ~6x), and every call's result,
  // the first included, comes from the compiled kernels.
  FirstCall,
};

// A call site the bind-time stage re-bound (LoadOptions::specialize), and what it has done so far.
struct SpecializedCallSite {
  std::string function;
  size_t instruction = 0;         // the (first) conv2d or linear OP instruction
  // The operators its kernel runs, in order: {"aten::conv2d", "aten::hardtanh_"}, or a 1x1 conv and the depthwise
  // conv it feeds, each with its activation. The kernel runs at the last conv2d's instruction; the others now
  // only drop the constants pushed for them.
  std::vector<std::string> fused;
  std::vector<size_t> fused_instructions; // fused[i]'s OP instruction
  std::string runs;               // as in CallSite::runs
  // "channels_last" (the result only feeds other specialised sites), "contiguous" or "as its input" (what the
  // generated kernels would give the operators and callers that see it)
  std::string result_layout;
  int64_t specialized_calls = 0;  // calls served by the compiled kernel
  int64_t generated_calls = 0;    // calls served by the generated kernels (each shape's first call included)
  std::vector<std::string> notes; // why a shape keeps the generated kernels
  double prepare_ms = 0;          // compiling and checking its kernels, on first calls (part of those runs)
  int64_t preparations = 0;       // shapes compiled and checked so far: one per input shape, however many
                                  // threads met it at once
};

// A call the bind-time stage folded: its result depends only on constants and input shapes (an SSD head's
// anchors), so it is computed once per input shape and remembered.
struct FoldedCallSite {
  std::string function;
  size_t instruction = 0; // its OP instruction
  std::string op;         // "aten::arange"
  int64_t computed = 0;   // calls that ran the operator (the first, and each new input)
  int64_t reused = 0;     // calls served by the remembered result
};

// A call site the bind-time stage runs in the layout its kernel is fast in: max_pool2d on a channels_last copy (its
// result given back contiguous) for the input shapes where that is faster; adaptive_avg_pool2d on a map a site made
// channels_last, as it is, for the input shapes where its result agrees with the contiguous map's.
struct LayoutCallSite {
  std::string function;
  size_t instruction = 0;
  std::string op;                  // "aten::max_pool2d", "aten::adaptive_avg_pool2d"
  int64_t channels_last_calls = 0; // calls run on a channels_last tensor
  int64_t stock_calls = 0;         // calls run as the stock kernels would (not faster, not agreeing, or n/a)
};

// An out-of-place product or sum the bind-time stage writes into an operand that nothing else holds at that call
// (the interpreter moved it out at its last use): the same values, with no result to allocate.
struct InPlaceCallSite {
  std::string function;
  size_t instruction = 0;
  std::string op;                // "aten::mul.Tensor", "aten::add.Tensor"
  int64_t in_place_calls = 0;    // calls that wrote into an operand
  int64_t allocating_calls = 0;  // calls run as the stock kernels would (an operand held elsewhere, another dtype)
};

// A quantized conv or linear call the bind-time stage runs on the engine fastest for it (opt-in:
// LoadOptions::choose_quantized_engines): its weights packed under each engine, one chosen per input shape among
// those whose results stay within one quantization step of the loaded packing's.
struct QuantizedEngineCallSite {
  std::string function;
  size_t instruction = 0;
  std::string op;                     // "quantized::conv2d_relu.new"
  std::vector<std::string> engines;   // the loaded engine first, then the others its weights were packed for
  std::vector<int64_t> calls;         // per engine: the caller's calls it served
  std::vector<std::string> notes;     // why an engine was left out for a shape, or why none was offered
};

// Bind-time freezing (the stage's first step): a model saved without torch.jit.freeze reads its weights as module
// attributes; where no method can change them, the stage reads them as constants, as freezing would have.
struct AttributeFreezingReport {
  bool applied = false;                // the model's bytecode was rewritten
  std::string kept_because;            // why it was not ("" when applied, or when there was nothing to freeze)
  int64_t attribute_reads = 0;         // GET_ATTR instructions that became constants
  int64_t folded_batch_norms = 0;      // inference batch_norm calls folded into the conv2d before them
  int64_t folded_weights = 0;          // the folded conv weights those calls made: methods that inline the same
                                       // conv and batch norm (forward and _forward_impl) share one
  int64_t folded_in_place = 0;         // of those, written over the loaded weight they were made from (nothing
                                       // else could read it), not beside it
  int64_t constant_branches = 0;       // branches on a constant (self.training) resolved
  int64_t computed_calls = 0;          // calls on constants only computed at bind time (not self.training)
  int64_t removed_dropouts = 0;        // dropout calls with train false, which return their input, removed
  int64_t removed_instructions = 0;    // instructions fewer in all (dead branches, moves, stores)
  int64_t frozen_functions = 0;        // the model's methods rewritten
  int64_t shared_programs = 0;         // of them, those whose bytecode did the same as one frozen before (forward
                                       // and _forward_impl): given that one's program instead of freezing again
};

// The model check (the stage's whole-run comparison of its compiled kernels with its sites' generated kernels,
// on copies of a caller's inputs once the caller's runs on them have settled) on one kind of inputs.
struct ModelCheckOfInputs {
  std::string inputs;             // the method and its inputs' kinds: "forward(float[1, 3, 224, 224])"
  bool compared = false;          // the timed pairs ran to a verdict (false: `note` says why not)
  bool compiled_kept = true;      // later runs on such inputs run the compiled kernels (false: every site's
                                  // generated kernels)
  int pairs = 0;                  // pairs of runs timed, one with the compiled kernels and one without
  double with_compiled_ms = 0;    // the median run of each side
  double without_compiled_ms = 0;
  double median_ratio = 0;        // the median of the pairs' ratios, with / without
  std::string note;               // why the check ended without a verdict ("" when compared)
};

// Every model check so far (Model::model_check).
struct ModelCheckReport {
  std::string not_run_because;    // why this model's runs are never checked ("" if they are)
  std::vector<ModelCheckOfInputs> checks;
};

// Preparation::Background's runs (Model::background_preparation).
struct BackgroundPreparationStatus {
  int runs = 0;         // started so far: one after each call that met a shape some site had no kernel for
  bool running = false; // one runs now
  double busy_ms = 0;   // their time in all, on their own thread
  std::string error;    // the last run's failure ("" if none): its sites keep their generated kernels
  // Preparation::Background was asked for but this model prepares on first calls, because a second run could be
  // seen (it has attributes a run may change, or draws random numbers, or prints): why. "" otherwise.
  std::string first_call_because;
};

} // namespace lightweight_dispatch
