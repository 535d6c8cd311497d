#include <runtime/op_binding.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/csrc/jit/mobile/code.h>
#include <torch/csrc/jit/mobile/function.h>

#include <map>
#include <unordered_map>
#include <set>
#include <sstream>

namespace lightweight_dispatch {

namespace {

using torch::jit::Stack;
using UnboxedFn = void (*)(Stack&);

bool dispatcher_knows(const c10::OperatorName& name) {
  return c10::Dispatcher::singleton().findOp(name).has_value();
}

size_t count_out_arguments(const c10::FunctionSchema& schema) {
  size_t count = 0;
  for (const auto& argument : schema.arguments()) {
    count += argument.is_out() ? 1 : 0;
  }
  return count;
}

// The call site passes `num_specified` arguments (out= ones included, always last); the kernel takes
// all of them. Missing trailing defaults go between the specified non-out arguments and the out ones,
// as the stock interpreter does.
std::function<void(Stack&)> with_defaults(
    UnboxedFn kernel,
    const c10::FunctionSchema& schema,
    int num_specified,
    const std::string& op_name) {
  const auto& arguments = schema.arguments();
  const size_t num_out = count_out_arguments(schema);
  if (num_specified < 0 || static_cast<size_t>(num_specified) >= arguments.size()) {
    return kernel;
  }
  if (static_cast<size_t>(num_specified) < num_out) {
    throw BindingError(op_name + ": a call site passes fewer arguments than its out= arguments", {op_name});
  }
  std::vector<c10::IValue> defaults;
  for (size_t i = num_specified - num_out; i < arguments.size() - num_out; ++i) {
    const auto& default_value = arguments[i].default_value();
    if (!default_value) {
      throw BindingError(
          op_name + ": a call site omits argument '" + arguments[i].name() + "', which has no default",
          {op_name});
    }
    defaults.push_back(*default_value);
  }
  if (num_out == 0 && defaults.size() == 1) {
    // The common case (add's alpha): one push_back is cheaper than a range insert.
    return [kernel, value = std::move(defaults.front())](Stack& stack) {
      stack.push_back(value);
      kernel(stack);
    };
  }
  if (num_out == 0) {
    return [kernel, defaults = std::move(defaults)](Stack& stack) {
      for (const c10::IValue& value : defaults) {
        stack.push_back(value);
      }
      kernel(stack);
    };
  }
  return [kernel, num_out, defaults = std::move(defaults)](Stack& stack) {
    stack.insert(stack.end() - static_cast<std::ptrdiff_t>(num_out), defaults.begin(), defaults.end());
    kernel(stack);
  };
}

std::string join(const std::set<std::string>& names) {
  std::ostringstream out;
  for (const auto& name : names) {
    out << "\n  " << name;
  }
  return out.str();
}

template <typename Visit>
void for_each_function(const torch::jit::mobile::Module& module, Visit visit) {
  for (torch::jit::mobile::Function* function : functions_to_run(module)) {
    visit(*function);
  }
}

BindingReport sorted_report(const std::map<std::string, OpUse>& uses) {
  BindingReport report;
  for (const auto& entry : uses) {
    report.ops.push_back(entry.second);
  }
  return report;
}

} // namespace

namespace {

// `roots` and, transitively, every function a CALL instruction of theirs names, each once, roots first.
std::vector<torch::jit::mobile::Function*> with_called_functions(
    const std::vector<torch::jit::mobile::Function*>& roots) {
  std::vector<torch::jit::mobile::Function*> functions;
  std::set<const torch::jit::mobile::Function*> seen;
  const auto add = [&](torch::jit::mobile::Function* function) {
    if (function && seen.insert(function).second) {
      functions.push_back(function);
    }
  };
  for (torch::jit::mobile::Function* root : roots) {
    add(root);
  }
  for (size_t i = 0; i < functions.size(); ++i) { // grows while it is walked
    const auto& code = functions[i]->get_code();
    for (const auto& instruction : code.instructions_) {
      if (instruction.op == torch::jit::CALL && instruction.X >= 0 &&
          static_cast<size_t>(instruction.X) < code.functions_.size()) {
        add(code.functions_[instruction.X]);
      }
    }
  }
  return functions;
}

} // namespace

std::vector<torch::jit::mobile::Function*> functions_to_run(const torch::jit::mobile::Module& module) {
  std::vector<torch::jit::mobile::Function*> all;
  for (const auto& function : module.compilation_unit().methods()) {
    all.push_back(function.get());
  }
  return with_called_functions(all);
}

std::vector<torch::jit::mobile::Function*> model_methods(const torch::jit::mobile::Module& module) {
  const auto& class_name = module._ivalue()->type()->name();
  std::vector<torch::jit::mobile::Function*> methods;
  if (!class_name) {
    return methods;
  }
  for (const auto& function : module.compilation_unit().methods()) {
    if (function->qualname().prefix() == class_name->qualifiedName()) {
      methods.push_back(function.get());
    }
  }
  return methods;
}

torch::jit::mobile::Function* find_model_method(const torch::jit::mobile::Module& module, const std::string& name) {
  for (torch::jit::mobile::Function* method : model_methods(module)) {
    if (method->name() == name) {
      return method;
    }
  }
  return nullptr;
}

std::vector<torch::jit::mobile::Function*> functions_callers_reach(const torch::jit::mobile::Module& module) {
  return with_called_functions(model_methods(module));
}

const char* op_path_name(OpPath path) {
  switch (path) {
    case OpPath::Static:
      return "static";
    case OpPath::Jit:
      return "jit";
    case OpPath::Dispatcher:
      return "dispatcher";
  }
  return "unknown";
}

std::string op_display_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

KernelIndex::KernelIndex(c10::ArrayRef<GeneratedKernel> kernels) {
  for (const auto& kernel : kernels) {
    by_name_.emplace(kernel.op_name, &kernel);
  }
}

const GeneratedKernel* KernelIndex::find(const std::string& op_name) const {
  auto it = by_name_.find(op_name);
  return it == by_name_.end() ? nullptr : it->second;
}

c10::FunctionSchema parse_kernel_schema(const GeneratedKernel& kernel) {
  return torch::jit::parseSchema(kernel.schema);
}

BindingReport bind_static(torch::jit::mobile::Module& module, const KernelIndex& index) {
  std::map<std::string, OpUse> paths;
  std::set<std::string> not_in_build;
  std::set<std::string> unresolved;
  std::unordered_map<std::string, c10::FunctionSchema> schemas; // parsed once per operator the model calls
  for_each_function(module, [&](torch::jit::mobile::Function& function) {
    auto& code = function.get_code();
    code.operators_.resize(code.op_names_.size());
    for (size_t i = 0; i < code.op_names_.size(); ++i) {
      const std::string name = op_display_name(code.op_names_[i]);
      if (const GeneratedKernel* kernel = index.find(name)) {
        auto schema = schemas.find(name);
        if (schema == schemas.end()) {
          schema = schemas.emplace(name, parse_kernel_schema(*kernel)).first;
        }
        code.operators_[i] = with_defaults(kernel->unboxed, schema->second, code.operator_input_sizes_[i], name);
        paths[name] = kernel->dispatcher_reason ? OpUse{name, OpPath::Dispatcher, kernel->dispatcher_reason}
                                                : OpUse{name, OpPath::Static, ""};
      } else if (dispatcher_knows(code.op_names_[i])) {
        not_in_build.insert(name);
      } else if (code.operators_[i]) {
        paths[name] = OpUse{name, OpPath::Jit, ""};
      } else {
        unresolved.insert(name);
      }
    }
  });
  if (!not_in_build.empty() || !unresolved.empty()) {
    std::ostringstream message;
    if (!not_in_build.empty()) {
      message << "this build has no generated kernel for " << not_in_build.size()
              << " operator(s) the model calls:" << join(not_in_build)
              << "\nThe ops yaml this build was generated from does not list them: add them (python "
                 "scripts/dump_ops.py --model-file MODEL.ptl) and rebuild (./build.sh, or your "
                 "lightweight_dispatch_add_kernels target), or use dynamic dispatch (lite_predictor --dispatch "
                 "dynamic; Dispatch::Dynamic in the API).";
    }
    if (!unresolved.empty()) {
      message << (not_in_build.empty() ? "" : "\n") << unresolved.size()
              << " operator(s) the model calls are implemented nowhere in this runtime:" << join(unresolved);
    }
    std::vector<std::string> ops(not_in_build.begin(), not_in_build.end());
    ops.insert(ops.end(), unresolved.begin(), unresolved.end());
    throw BindingError(message.str(), std::move(ops));
  }
  // Every call site now has an operator: stop Function::run from resolving them again.
  for_each_function(module, [](torch::jit::mobile::Function& function) { function.get_code().initialized = true; });
  return sorted_report(paths);
}

BindingReport describe_dynamic(const torch::jit::mobile::Module& module) {
  std::map<std::string, OpUse> paths;
  for_each_function(module, [&](torch::jit::mobile::Function& function) {
    const auto& code = function.get_code();
    for (const auto& op_name : code.op_names_) {
      const std::string name = op_display_name(op_name);
      paths[name] = OpUse{name, dispatcher_knows(op_name) ? OpPath::Dispatcher : OpPath::Jit, ""};
    }
  });
  return sorted_report(paths);
}

const char* opcode_name(torch::jit::OpCode op) {
  switch (op) {
#define LD_OPCODE_NAME(name, _) \
  case torch::jit::name:          \
    return #name;
    FORALL_OPCODES(LD_OPCODE_NAME)
#undef LD_OPCODE_NAME
  }
  return "an unknown opcode";
}

} // namespace lightweight_dispatch
