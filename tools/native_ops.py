"""The model of an operator: its parsed schema, and the kernel CPU static dispatch calls for it.

native_functions.yaml and tags.yaml are read from the installed torchgen, so the generated code
matches the installed ATen headers by construction. torchgen's own parser builds the model
(`NativeFunction`, `FunctionSchema`); this module adds the static-dispatch decision and the
kernel's C++ signature, and records why an op cannot be generated instead of failing later.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import torchgen
from torchgen.api.types import CppSignatureGroup, NativeSignature
from torchgen.context import native_function_manager
from torchgen.gen import parse_native_yaml
from torchgen.model import BackendIndex, DispatchKey, NativeFunction

# The static-dispatch order for backend CPU: the first key with a kernel wins.
CPU_DISPATCH_ORDER: tuple[DispatchKey, ...] = (
    DispatchKey.CPU,
    DispatchKey.CompositeExplicitAutograd,
    DispatchKey.CompositeExplicitAutogradNonFunctional,
    DispatchKey.CompositeImplicitAutograd,
)


def torchgen_native_dir() -> Path:
    return Path(torchgen.__file__).parent / "packaged" / "ATen" / "native"


@dataclass(frozen=True)
class KernelParameter:
    """One parameter of the kernel's C++ signature: the schema argument it takes, and its C++ type."""

    name: str
    cpp_type: str


@dataclass(frozen=True)
class KernelChoice:
    """The per-backend kernel an op's unboxing function calls, and where it is declared."""

    dispatch_key: str  # e.g. "CPU", "CompositeExplicitAutograd"
    namespace: str  # e.g. "at::cpu"
    function: str  # e.g. "add", "add_outf"
    header: str  # e.g. "ATen/ops/add_cpu_dispatch.h"
    parameters: tuple[KernelParameter, ...]  # as the installed header declares them
    # A method kernel: the schema argument whose object the method is called on (packed_weight->apply(...)).
    receiver: str | None = None

    @property
    def qualified_function(self) -> str:
        if self.receiver is not None:
            return f"{self.receiver}->{self.function}"
        return f"{self.namespace}::{self.function}"


@dataclass(frozen=True)
class NativeOp:
    """One entry of native_functions.yaml with its static-dispatch decision.

    `kernel` is what CPU static dispatch calls; `quantized_kernel` the QuantizedCPU kernel native_functions.yaml
    names, which a build whose backends include QuantizedCPU calls when a tensor argument is quantized.
    """

    function: NativeFunction
    kernel: KernelChoice | None
    unsupported_reason: str | None
    quantized_kernel: KernelChoice | None = None

    @property
    def name(self) -> str:
        return qualified_name(self.function)

    @property
    def schema(self) -> str:
        return f"aten::{self.function.func}"


def qualified_name(f: NativeFunction) -> str:
    """aten::add.Tensor, aten::hardtanh_ (no dot when the overload name is empty)."""
    return f"aten::{f.func.name}"


def _kernel_signature(f: NativeFunction) -> tuple[str, tuple[KernelParameter, ...]]:
    """The kernel function's name and parameters.

    The faithful signature takes dtype/layout/device/pin_memory separately rather than as TensorOptions
    and out= arguments last (`add_outf`), which is the stack's order. Non-SymInt: mobile has only ints.
    """
    with native_function_manager(f):
        # Per-backend namespaces declare even manually bound ops (numel, contiguous) under their plain names.
        group = CppSignatureGroup.from_native_function(f, method=False, fallback_binding=False)
        signature = group.faithful_signature or group.signature
        parameters = tuple(KernelParameter(b.name, str(b.type)) for b in signature.arguments())
        return signature.name(), parameters


def _has_structured_kernel(f: NativeFunction, index: BackendIndex, by_name: dict[str, NativeFunction]) -> bool:
    if index.has_kernel(f):
        return True
    delegate = f.structured_delegate
    return delegate is not None and str(delegate) in by_name and index.has_kernel(by_name[str(delegate)])


def choose_dispatch_key(
    f: NativeFunction, indices: dict[DispatchKey, BackendIndex], by_name: dict[str, NativeFunction]
) -> DispatchKey | None:
    """The first key in CPU_DISPATCH_ORDER with a kernel for `f`, or None if CPU cannot reach it."""
    if _has_structured_kernel(f, indices[DispatchKey.CPU], by_name):
        return DispatchKey.CPU
    if f.has_composite_explicit_autograd_kernel:
        return DispatchKey.CompositeExplicitAutograd
    if f.has_composite_explicit_autograd_non_functional_kernel:
        return DispatchKey.CompositeExplicitAutogradNonFunctional
    if f.has_composite_implicit_autograd_kernel:
        return DispatchKey.CompositeImplicitAutograd
    return None


def _backends_with_kernels(f: NativeFunction, indices: dict[DispatchKey, BackendIndex]) -> list[str]:
    return sorted(str(key) for key, index in indices.items() if index.has_kernel(f))


def quantized_cpu_kernel(f: NativeFunction, index: BackendIndex) -> KernelChoice | None:
    """The at::native function native_functions.yaml names for QuantizedCPU, declared in ATen/ops/<op>_native.h.

    None when there is none, or when it is a structured or SymInt kernel (no such QuantizedCPU kernel exists in
    torch 2.13; neither could be called with the arguments the lite interpreter has).
    """
    metadata = index.get_kernel(f)
    if metadata is None or metadata.structured or metadata.supports_symint():
        return None
    with native_function_manager(f):
        signature = NativeSignature(f.func, prefix="", symint=False)
        parameters = tuple(KernelParameter(b.name, str(b.type)) for b in signature.arguments())
    return KernelChoice(
        dispatch_key=str(DispatchKey.QuantizedCPU),
        namespace="at::native",
        function=metadata.kernel,
        header=f"ATen/ops/{f.root_name}_native.h",
        parameters=parameters,
    )


def model_native_op(
    f: NativeFunction, indices: dict[DispatchKey, BackendIndex], by_name: dict[str, NativeFunction]
) -> NativeOp:
    quantized = quantized_cpu_kernel(f, indices[DispatchKey.QuantizedCPU])
    key = choose_dispatch_key(f, indices, by_name)
    if key is None:
        others = ", ".join(_backends_with_kernels(f, indices)) or "none"
        return NativeOp(f, None, f"no CPU or composite kernel (kernels exist only for: {others})", quantized)
    function, parameters = _kernel_signature(f)
    lowered = str(key).lower()
    return NativeOp(
        f,
        KernelChoice(
            dispatch_key=str(key),
            namespace=f"at::{lowered}",
            function=function,
            header=f"ATen/ops/{f.root_name}_{lowered}_dispatch.h",
            parameters=parameters,
        ),
        None,
        quantized,
    )


@dataclass(frozen=True)
class NativeCatalog:
    """Every native function of the installed torch, by qualified name."""

    ops: dict[str, NativeOp]

    def __contains__(self, name: str) -> bool:
        return name in self.ops

    def __getitem__(self, name: str) -> NativeOp:
        return self.ops[name]

    @cached_property
    def reachable_cpu(self) -> int:
        return sum(1 for op in self.ops.values() if op.kernel is not None)

    @cached_property
    def with_quantized_kernel(self) -> int:
        return sum(1 for op in self.ops.values() if op.quantized_kernel is not None)

    @cached_property
    def reachable_cpu_or_quantized(self) -> int:
        return sum(1 for op in self.ops.values() if op.kernel is not None or op.quantized_kernel is not None)


@lru_cache(maxsize=4)
def load_native_catalog(native_dir: Path | None = None) -> NativeCatalog:
    """Parsed once per directory and process: parsing native_functions.yaml takes about a second."""
    directory = native_dir or torchgen_native_dir()
    parsed = parse_native_yaml(str(directory / "native_functions.yaml"), str(directory / "tags.yaml"))
    by_name = {str(f.func.name): f for f in parsed.native_functions}
    ops = {
        qualified_name(f): model_native_op(f, parsed.backend_indices, by_name)
        for f in parsed.native_functions
    }
    return NativeCatalog(ops)
