"""The model of the project's own operators, declared in custom_ops.yaml.

Each entry is a JIT schema with its namespace (`torchvision::nms(...) -> Tensor`), the C++ function that
implements it and the header declaring that function. Schemas are parsed by torchgen's parser, so the
same type mapping and emitters serve custom and native operators.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torchgen import local
from torchgen.api import cpp
from torchgen.model import FunctionSchema

from tools.declared_ops import load_entries
from tools.native_ops import KernelChoice, KernelParameter

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CUSTOM_OPS_YAML = REPO_ROOT / "custom_ops.yaml"


class CustomOpsError(ValueError):
    """custom_ops.yaml is malformed; the message names the entry."""


@dataclass(frozen=True)
class CustomOp:
    namespace: str  # torchvision
    func: FunctionSchema
    kernel: KernelChoice

    @property
    def name(self) -> str:
        return f"{self.namespace}::{self.func.name}"

    @property
    def schema(self) -> str:
        return f"{self.namespace}::{self.func}"


def _parameters(func: FunctionSchema) -> tuple[KernelParameter, ...]:
    # The kernel takes the schema's arguments in order, with the C++ types ATen would use (non-SymInt).
    with local.parametrize(use_const_ref_for_mutable_tensors=False, use_ilistref_for_tensor_lists=False):
        return tuple(
            KernelParameter(a.name, cpp.argument_type(a, binds=a.name, symint=False).cpp_type())
            for a in func.arguments.flat_all
        )


def parse_custom_op(entry: object, source: str) -> CustomOp:
    if not isinstance(entry, dict) or not {"func", "kernel", "header"} <= set(entry):
        raise CustomOpsError(f"{source}: each entry needs func, kernel and header; got {entry!r}")
    qualified = str(entry["func"])
    namespace, sep, schema_text = qualified.partition("::")
    if not sep or "(" in namespace:
        raise CustomOpsError(f"{source}: {qualified!r} must start with its namespace, e.g. torchvision::nms(...)")
    try:
        func = FunctionSchema.parse(schema_text)
    except Exception as error:  # torchgen raises AssertionError/RuntimeError with the reason
        raise CustomOpsError(f"{source}: cannot parse the schema {qualified!r}: {error}") from None
    kernel_path = str(entry["kernel"])
    kernel_namespace, _, function = kernel_path.rpartition("::")
    kernel = KernelChoice(
        dispatch_key="custom",
        namespace=kernel_namespace,
        function=function,
        header=str(entry["header"]),
        parameters=_parameters(func),
    )
    return CustomOp(namespace, func, kernel)


def load_custom_ops(path: Path = DEFAULT_CUSTOM_OPS_YAML) -> dict[str, CustomOp]:
    """Custom operators by qualified name (torchvision::nms)."""
    ops = [parse_custom_op(entry, str(path)) for entry in load_entries(path, CustomOpsError)]
    return {op.name: op for op in ops}
