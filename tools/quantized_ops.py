"""The model of dispatcher operators outside native_functions.yaml, declared in quantized_ops.yaml.

LibTorch registers `quantized::*` (and a few `aten::` RNN ops) with the c10 dispatcher from C++
(`TORCH_LIBRARY(quantized, ...)`), not from native_functions.yaml, so torchgen knows nothing of them.
quantized_ops.yaml gives each one's exact JIT schema and how its generated unboxing function reaches
LibTorch's implementation: a virtual method of a packed-parameter object, an exported function, or,
where LibTorch exports no entry point, the operator's c10 handle (reported as the `dispatcher` path).

Schemas name TorchScript classes (`__torch__.torch.classes.quantized.Conv2dPackedParamsBase`) that
torchgen's parser does not know; they are parsed with a placeholder type and the class is kept beside
the schema, by argument name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from torchgen import local
from torchgen.api import cpp
from torchgen.model import FunctionSchema

from tools.cpp_types import UnsupportedType, custom_class_cpp_type
from tools.declared_ops import load_entries
from tools.native_ops import KernelChoice, KernelParameter

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_QUANTIZED_OPS_YAML = REPO_ROOT / "quantized_ops.yaml"

# torchgen's schema type standing in for a TorchScript class while parsing (it never occurs in these schemas).
CLASS_PLACEHOLDER = "GraphModule"
_CLASS_TYPE = re.compile(r"__torch__\.torch\.classes\.[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")
_CLASS_ARGUMENT = re.compile(rf"({_CLASS_TYPE.pattern})(\[\])?\s+([A-Za-z_][A-Za-z0-9_]*)")


class QuantizedOpsError(ValueError):
    """quantized_ops.yaml is malformed; the message names the entry."""


@dataclass(frozen=True)
class ParsedSchema:
    """A JIT schema as torchgen parses it, with the TorchScript class of each class-typed argument."""

    func: FunctionSchema  # class types replaced by CLASS_PLACEHOLDER
    argument_classes: tuple[tuple[str, str], ...]  # (argument name, qualified class), in schema order


def parse_schema_with_classes(schema_text: str) -> ParsedSchema:
    """Parse `name.overload(args) -> returns` (no namespace), TorchScript class types included."""
    arguments_part, _, _ = schema_text.partition(") ->")
    classes = tuple((m.group(3), m.group(1)) for m in _CLASS_ARGUMENT.finditer(arguments_part) if not m.group(2))
    func = FunctionSchema.parse(_CLASS_TYPE.sub(CLASS_PLACEHOLDER, schema_text))
    return ParsedSchema(func, classes)


@dataclass(frozen=True)
class QuantizedOp:
    """One declared operator: its schema and either the kernel it calls or why it goes through the dispatcher."""

    namespace: str  # quantized
    parsed: ParsedSchema
    schema: str  # the JIT schema exactly as declared, namespace included
    kernel: KernelChoice | None  # None: through the dispatcher
    dispatcher_reason: str | None

    @property
    def name(self) -> str:
        return f"{self.namespace}::{self.parsed.func.name}"

    @property
    def func(self) -> FunctionSchema:
        return self.parsed.func

    @property
    def class_arguments(self) -> dict[str, str]:
        """Argument name -> the C++ class its TorchScript object holds."""
        return {name: custom_class_cpp_type(qualified) for name, qualified in self.parsed.argument_classes}


def _kernel_parameters(parsed: ParsedSchema) -> tuple[KernelParameter, ...]:
    classes = dict(parsed.argument_classes)
    parameters = []
    with local.parametrize(use_const_ref_for_mutable_tensors=False, use_ilistref_for_tensor_lists=False):
        for argument in parsed.func.arguments.flat_all:
            if argument.name in classes:
                cpp_type = f"const c10::intrusive_ptr<{custom_class_cpp_type(classes[argument.name])}>&"
            else:
                cpp_type = cpp.argument_type(argument, binds=argument.name, symint=False).cpp_type()
            parameters.append(KernelParameter(argument.name, cpp_type))
    return tuple(parameters)


def _method_kernel(method: str, header: str, parsed: ParsedSchema, source: str) -> KernelChoice:
    receiver, dot, function = method.partition(".")
    if not dot or receiver not in dict(parsed.argument_classes):
        raise QuantizedOpsError(
            f"{source}: method {method!r} must be ARGUMENT.METHOD with ARGUMENT a class-typed argument of "
            f"{parsed.func.name}"
        )
    parameters = tuple(p for p in _kernel_parameters(parsed) if p.name != receiver)
    return KernelChoice("QuantizedCPU", "", function, header, parameters, receiver=receiver)


def _function_kernel(kernel: str, header: str, parsed: ParsedSchema) -> KernelChoice:
    namespace, _, function = kernel.rpartition("::")
    return KernelChoice("QuantizedCPU", namespace, function, header, _kernel_parameters(parsed))


def parse_quantized_op(entry: object, source: str) -> QuantizedOp:
    ways = ("method", "kernel", "dispatcher")
    if not isinstance(entry, dict) or "func" not in entry or sum(way in entry for way in ways) != 1:
        raise QuantizedOpsError(f"{source}: each entry needs func and exactly one of method, kernel, dispatcher; got {entry!r}")
    qualified = str(entry["func"])
    namespace, sep, schema_text = qualified.partition("::")
    if not sep or "(" in namespace:
        raise QuantizedOpsError(f"{source}: {qualified!r} must start with its namespace, e.g. quantized::add(...)")
    try:
        parsed = parse_schema_with_classes(schema_text)
    except Exception as error:  # torchgen raises AssertionError/RuntimeError with the reason
        raise QuantizedOpsError(f"{source}: cannot parse the schema {qualified!r}: {error}") from None
    if "dispatcher" in entry:
        reason = str(entry["dispatcher"]).strip()
        if not reason:
            raise QuantizedOpsError(f"{source}: {qualified}: 'dispatcher' needs the reason LibTorch has no entry point")
        return QuantizedOp(namespace, parsed, qualified, None, reason)
    if "header" not in entry:
        raise QuantizedOpsError(f"{source}: {qualified}: a method or kernel entry needs the header declaring it")
    try:
        if "method" in entry:
            kernel = _method_kernel(str(entry["method"]), str(entry["header"]), parsed, source)
        else:
            kernel = _function_kernel(str(entry["kernel"]), str(entry["header"]), parsed)
    except UnsupportedType as error:
        raise QuantizedOpsError(f"{source}: {qualified}: {error}") from None
    return QuantizedOp(namespace, parsed, qualified, kernel, None)


def load_quantized_ops(path: Path = DEFAULT_QUANTIZED_OPS_YAML) -> dict[str, QuantizedOp]:
    """Declared operators by qualified name (quantized::conv2d.new)."""
    ops = [parse_quantized_op(entry, str(path)) for entry in load_entries(path, QuantizedOpsError)]
    return {op.name: op for op in ops}
