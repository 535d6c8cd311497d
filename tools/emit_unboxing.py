"""Emitters: the generated C++ text, from the op model and the type mapping.

Files are templates with named holes; fragments come from small functions. Every function is pure.
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Mapping
from string import Template

from torchgen.model import Argument, BaseTy, BaseType, FunctionSchema, Return

from tools.cpp_types import (
    UnsupportedType,
    check_return_boxable,
    quantized_check,
    unbox_argument,
    unbox_custom_class,
)
from tools.native_ops import KernelChoice, KernelParameter


@dataclass(frozen=True)
class GeneratedKernel:
    """One operator the build carries: its name, JIT schema, unboxing function name and C++ body."""

    op_name: str  # aten::add.Tensor
    schema: str  # aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
    function_name: str  # aten_add_Tensor
    headers: tuple[str, ...]  # the headers that declare the kernel(s) it calls
    definition: str  # the C++ function
    dispatcher_reason: str | None = None  # set when it calls the operator through the dispatcher, and why
    chooses_backend: bool = False  # picks QuantizedCPU or CPU from its tensor arguments on every call


def unboxing_function_name(op_name: str) -> str:
    """A C++ identifier for an op's unboxing function: aten::add.Tensor -> aten_add_Tensor."""
    return re.sub(r"[^A-Za-z0-9_]", "_", op_name.replace("::", "_"))


def shard_of(op_name: str, num_shards: int) -> int:
    """Stable shard assignment, so adding one op changes one shard file and leaves the others untouched."""
    return zlib.crc32(op_name.encode()) % num_shards


def _schema_argument_index(func: FunctionSchema) -> dict[str, tuple[int, Argument]]:
    # flat_all is the JIT schema order: positional, keyword-only, then out=, as the stack holds them.
    return {a.name: (i, a) for i, a in enumerate(func.arguments.flat_all)}


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unbox_arguments(
    func: FunctionSchema, kernel: KernelChoice, custom_classes: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """The statements that read the kernel's arguments from `args[i]` (in schema order), and the call's arguments."""
    by_name = _schema_argument_index(func)
    parameters = list(kernel.parameters)
    if kernel.receiver is not None:
        parameters.append(KernelParameter(kernel.receiver, ""))
    read: dict[int, list[str]] = {}
    call_args: list[str] = []
    for parameter in parameters:
        if parameter.name not in by_name:
            raise UnsupportedType(f"kernel parameter {parameter.name} has no schema argument")
        index, argument = by_name[parameter.name]
        if argument.name in custom_classes:
            unboxed = unbox_custom_class(argument.name, custom_classes[argument.name], f"args[{index}]")
        else:
            unboxed = unbox_argument(
                argument.name,
                argument.type,
                f"args[{index}]",
                mutable=argument.is_write,
                cpp_param_type=parameter.cpp_type,
            )
        read[index] = list(unboxed.statements)
        if parameter.name != kernel.receiver:
            call_args.append(unboxed.expr)
    statements = [line for index in sorted(read) for line in read[index]]
    return statements, call_args


def _call_and_results(func: FunctionSchema, kernel: KernelChoice, call_args: list[str]) -> list[str]:
    """Call the kernel and replace the arguments on the stack by its results."""
    for r in func.returns:
        check_return_boxable(r)
    num_args = len(func.arguments.flat_all)
    call = f"{kernel.qualified_function}({', '.join(call_args)})"
    returns = func.returns
    # drop_arguments / push_result / replace_arguments: out-of-line helpers (lightweight_dispatch/unboxing_helpers.h)
    # that take the result by value, so a result referring to an argument is copied before the drop.
    if len(returns) == 0:
        lines = [f"{call};"]
        if num_args:
            lines.append(f"drop_arguments(stack, {num_args});")
        return lines
    if len(returns) == 1:
        return [f"replace_arguments(stack, {num_args}, {_boxed(returns[0], call)});"]
    lines = [f"auto results = {call};"]
    if num_args:
        lines.append(f"drop_arguments(stack, {num_args});")
    lines.extend(
        f"push_result(stack, {_boxed(r, f'std::get<{i}>(std::move(results))')});" for i, r in enumerate(returns)
    )
    return lines


def _arguments_line(func: FunctionSchema) -> list[str]:
    num_args = len(func.arguments.flat_all)
    return [f"auto args = stack.end() - {num_args};"] if num_args else []


def emit_unboxing_body(
    func: FunctionSchema, kernel: KernelChoice, custom_classes: Mapping[str, str] | None = None
) -> list[str]:
    """The statements of an unboxing function: read the arguments, call the kernel, replace them by results."""
    statements, call_args = _unbox_arguments(func, kernel, custom_classes or {})
    return _arguments_line(func) + statements + _call_and_results(func, kernel, call_args)


def quantized_condition(func: FunctionSchema, tensor_locals: bool = False) -> str:
    """True when any tensor argument is quantized: the dispatcher would pick QuantizedCPU for the call.

    With `tensor_locals`, plain tensor arguments are already read into locals named after them.
    """
    checks = []
    for i, argument in enumerate(func.arguments.flat_all):
        check = quantized_check(argument.type, f"args[{i}]")
        if check is not None and tensor_locals and check == f"args[{i}].toTensor().is_quantized()":
            check = f"{argument.name}.is_quantized()"
        if check is not None:
            checks.append(check)
    if not checks:
        raise UnsupportedType("no tensor argument to choose the backend from")
    return " || ".join(checks)


def emit_backend_select_body(
    op_name: str, func: FunctionSchema, cpu_kernel: KernelChoice | None, quantized_kernel: KernelChoice
) -> list[str]:
    """Pick the kernel from the tensor arguments' backend, once per call: QuantizedCPU if any is quantized.

    Arguments read the same way for both kernels are read once, before the choice.
    """
    q_statements, q_args = _unbox_arguments(func, quantized_kernel, {})
    quantized_call = _call_and_results(func, quantized_kernel, q_args)
    if cpu_kernel is None:
        condition = quantized_condition(func)
        # Only a QuantizedCPU kernel: a float call is the dispatcher's "no kernel for backend CPU" error.
        return (
            _arguments_line(func)
            + [f"if (!({condition})) {{", f"  throw_no_cpu_kernel({_c_string(op_name)});", "}"]
            + q_statements
            + quantized_call
        )
    cpu_statements, cpu_args = _unbox_arguments(func, cpu_kernel, {})
    cpu_call = _call_and_results(func, cpu_kernel, cpu_args)
    shared = cpu_statements if cpu_statements == q_statements else []
    condition = quantized_condition(func, tensor_locals=bool(shared))
    q_only = [] if shared else q_statements
    cpu_only = [] if shared else cpu_statements
    return (
        _arguments_line(func)
        + shared
        + [f"if ({condition}) {{"]
        + [f"  {line}" for line in q_only + quantized_call + ["return;"]]
        + ["}"]
        + cpu_only
        + cpu_call
    )


def _boxed(r: Return, expr: str) -> str:
    """A result expression as the result helpers take it: a Scalar through the out-of-line box_scalar."""
    is_scalar = isinstance(r.type, BaseType) and r.type.name == BaseTy.Scalar
    return f"box_scalar({expr})" if is_scalar else expr


def _definition(name: str, comments: list[str], body: list[str]) -> str:
    lines = "\n".join(f"  {line}" for line in body)
    header = "".join(f"// {c}\n" for c in comments)
    return f"{header}void {name}(torch::jit::Stack& stack) {{\n{lines}\n}}\n"


def emit_generated_kernel(
    op_name: str,
    schema: str,
    func: FunctionSchema,
    kernel: KernelChoice,
    custom_classes: Mapping[str, str] | None = None,
) -> GeneratedKernel:
    name = unboxing_function_name(op_name)
    definition = _definition(
        name,
        [schema, f"kernel: {kernel.qualified_function} ({kernel.dispatch_key})"],
        emit_unboxing_body(func, kernel, custom_classes),
    )
    return GeneratedKernel(op_name, schema, name, (kernel.header,), definition)


def emit_backend_select_kernel(
    op_name: str, schema: str, func: FunctionSchema, cpu_kernel: KernelChoice | None, quantized_kernel: KernelChoice
) -> GeneratedKernel:
    """A native op with a QuantizedCPU kernel, in a build whose backends include QuantizedCPU."""
    name = unboxing_function_name(op_name)
    choice = f"kernel: {quantized_kernel.qualified_function} (QuantizedCPU) if a tensor argument is quantized"
    otherwise = (
        f"else {cpu_kernel.qualified_function} ({cpu_kernel.dispatch_key})" if cpu_kernel else "else an error (no CPU kernel)"
    )
    definition = _definition(
        name, [schema, choice, otherwise], emit_backend_select_body(op_name, func, cpu_kernel, quantized_kernel)
    )
    headers = (quantized_kernel.header,) + ((cpu_kernel.header,) if cpu_kernel else ())
    return GeneratedKernel(op_name, schema, name, headers, definition, chooses_backend=True)


DISPATCHER_CALL_HEADER = "lightweight_dispatch/dispatcher_call.h"


def emit_dispatcher_kernel(op_name: str, schema: str, reason: str) -> GeneratedKernel:
    """An operator LibTorch exports no entry point for: called through its c10 operator handle, found once."""
    name = unboxing_function_name(op_name)
    base, _, overload = op_name.partition(".")
    body = [
        f"static const c10::OperatorHandle& op = find_dispatcher_operator({_c_string(base)}, {_c_string(overload)});",
        "call_through_dispatcher(op, stack);",
    ]
    definition = _definition(name, [schema, f"kernel: the c10 dispatcher, because {reason}"], body)
    return GeneratedKernel(op_name, schema, name, (DISPATCHER_CALL_HEADER,), definition, dispatcher_reason=reason)


SHARD_TEMPLATE = Template(
    """\
// @generated by tools/gen_unboxing.py from $source: do not edit.
// Unboxing functions, shard $shard of $num_shards: each pops its operator's arguments from the lite
// interpreter's stack, calls the per-backend kernel directly and pushes the results. The only calls
// into the c10 dispatcher are those whose comment says so (quantized_ops.yaml's `dispatcher` entries).
#include <lightweight_dispatch/unboxing_helpers.h>

$includes

namespace lightweight_dispatch::generated {

$definitions
} // namespace lightweight_dispatch::generated
"""
)


def emit_shard(kernels: list[GeneratedKernel], shard: int, num_shards: int, source: str) -> str:
    ordered = sorted(kernels, key=lambda k: k.op_name)
    headers = sorted({h for k in ordered for h in k.headers})
    return SHARD_TEMPLATE.substitute(
        source=source,
        shard=shard,
        num_shards=num_shards,
        includes="\n".join(f"#include <{h}>" for h in headers) or "// (no operators in this shard)",
        definitions="\n".join(k.definition for k in ordered),
    )


TABLE_TEMPLATE = Template(
    """\
// @generated by tools/gen_unboxing.py from $source: do not edit.
// The table the runtime binds from: one row per operator this build carries ($count operators).
#include <lightweight_dispatch/kernel_table.h>

namespace lightweight_dispatch::generated {
$declarations
} // namespace lightweight_dispatch::generated

namespace lightweight_dispatch {

namespace {
const GeneratedKernel kGeneratedKernels[] = {
$rows
};
} // namespace

c10::ArrayRef<GeneratedKernel> generated_kernels() {
  return $array_ref;
}

bool lightweight_dispatch_built() {
  return true;
}

} // namespace lightweight_dispatch
"""
)


def emit_kernel_table(kernels: list[GeneratedKernel], source: str) -> str:
    ordered = sorted(kernels, key=lambda k: k.op_name)
    names = [k.function_name for k in ordered]
    if len(set(names)) != len(names):
        raise ValueError("two operators map to the same unboxing function name")
    declarations = "\n".join(f"void {k.function_name}(torch::jit::Stack& stack);" for k in ordered)
    rows = "\n".join(
        f"    {{{_c_string(k.op_name)},\n     {_c_string(k.schema)},\n     &generated::{k.function_name},\n"
        f"     {_c_string(k.dispatcher_reason) if k.dispatcher_reason else 'nullptr'}}},"
        for k in ordered
    )
    if not ordered:
        # A C++ array cannot be empty; an empty selection binds nothing.
        rows = '    {"", "", nullptr, nullptr},'
        array_ref = "{}"
    else:
        array_ref = "kGeneratedKernels"
    return TABLE_TEMPLATE.substitute(
        source=source, count=len(ordered), declarations=declarations, rows=rows, array_ref=array_ref
    )


REGISTRATION_TEMPLATE = Template(
    """\
// @generated by tools/gen_unboxing.py from $source: do not edit.
// Registers the project's own operators this build carries with the c10 dispatcher, for --dispatch
// dynamic and for C++ users who call them through the dispatcher. Static dispatch does not need this:
// the generated kernels call the functions directly. Each is registered as a boxed kernel that runs its
// generated unboxing function (the dispatcher's boxed convention leaves every argument on the stack, as
// those functions expect), so no second, templated unboxing layer is compiled here. An explicit
// function, not a static initialiser, so that no linker can drop it from a static archive.
#include <lightweight_dispatch/kernel_table.h>

#include <torch/library.h>

#include <memory>

namespace lightweight_dispatch::generated {
$declarations
} // namespace lightweight_dispatch::generated

namespace lightweight_dispatch {

namespace {

// A boxed kernel that runs one generated unboxing function.
class RunUnboxingFunction final : public c10::OperatorKernel {
 public:
  explicit RunUnboxingFunction(void (*unboxing_function)(torch::jit::Stack&))
      : unboxing_function_(unboxing_function) {}
  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack* stack) {
    unboxing_function_(*stack);
  }

 private:
  void (*unboxing_function_)(torch::jit::Stack&);
};

struct CustomOp {
  const char* schema; // without the namespace
  void (*unboxing_function)(torch::jit::Stack&);
};

// Defines `ops` in a library for `ns`, created on the first call and kept for the life of the process.
const torch::Library* define_library(const char* ns, c10::ArrayRef<CustomOp> ops) {
  auto* library = new torch::Library(torch::Library::DEF, ns, std::nullopt, __FILE__, __LINE__);
  for (const CustomOp& op : ops) {
    library->def(
        op.schema,
        torch::dispatch(
            c10::DispatchKey::CPU,
            torch::CppFunction::makeFromBoxedFunctor(std::make_unique<RunUnboxingFunction>(op.unboxing_function))));
  }
  return library;
}

} // namespace

void register_custom_ops_with_dispatcher() {
$libraries
}

} // namespace lightweight_dispatch
"""
)


def _library_block(namespace: str, ops: list[tuple[str, str]]) -> str:
    """ops: (schema without namespace, generated unboxing function)."""
    rows = "\n".join(f"      {{{_c_string(schema)},\n       &generated::{function}}}," for schema, function in ops)
    return (
        f"  static const CustomOp {namespace}_ops[] = {{\n{rows}\n  }};\n"
        f"  static const torch::Library* const {namespace}_library = define_library({_c_string(namespace)}, "
        f"{namespace}_ops);\n  (void){namespace}_library;"
    )


def emit_custom_op_registration(ops: list[tuple[str, str, str]], source: str) -> str:
    """ops: (namespace, schema without namespace, generated unboxing function name)."""
    by_namespace: dict[str, list[tuple[str, str]]] = {}
    for namespace, schema, function in sorted(ops):
        by_namespace.setdefault(namespace, []).append((schema, function))
    return REGISTRATION_TEMPLATE.substitute(
        source=source,
        declarations="\n".join(f"void {op[2]}(torch::jit::Stack& stack);" for op in sorted(ops)) or "// none",
        libraries="\n".join(_library_block(ns, defs) for ns, defs in sorted(by_namespace.items())) or "  // none",
    )
