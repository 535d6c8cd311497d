"""C++ type mapping: how a schema argument becomes the C++ value its kernel takes, and how results go back.

Pure functions from torchgen's schema types to C++ fragments. Each argument is read from the IValue the
lite interpreter left on the stack (`args[i]`) into a named local whose type binds to the kernel parameter
without a copy where the IValue's storage allows it (tensors by reference; int lists into a DimVector,
which stays on the stack frame for up to five elements).
"""
from __future__ import annotations

from dataclasses import dataclass

from torchgen.model import BaseTy, BaseType, ListType, OptionalType, Return, Type


class UnsupportedType(Exception):
    """A schema type this generator cannot unbox, with the reason a user can act on."""


@dataclass(frozen=True)
class UnboxedArgument:
    """C++ statements that declare local `name` from an IValue, and the expression the kernel call uses."""

    statements: tuple[str, ...]
    expr: str


# Scalar-like schema types: the C++ value type and the IValue accessor that produces it.
_BASE_UNBOXING: dict[BaseTy, tuple[str, str]] = {
    BaseTy.int: ("int64_t", "toInt()"),
    BaseTy.SymInt: ("int64_t", "toInt()"),  # the lite interpreter has no symbolic ints
    BaseTy.float: ("double", "toDouble()"),
    BaseTy.bool: ("bool", "toBool()"),
    BaseTy.str: ("std::string_view", "toStringView()"),
    BaseTy.Scalar: ("at::Scalar", "toScalar()"),
    BaseTy.ScalarType: ("at::ScalarType", "toScalarType()"),
    BaseTy.Layout: ("at::Layout", "toLayout()"),
    BaseTy.Device: ("at::Device", "toDevice()"),
    BaseTy.MemoryFormat: ("at::MemoryFormat", "toMemoryFormat()"),
    BaseTy.Storage: ("at::Storage", "toStorage()"),
    BaseTy.Stream: ("at::Stream", "toStream()"),
    BaseTy.Generator: ("at::Generator", "toGenerator()"),
    BaseTy.DeviceIndex: ("c10::DeviceIndex", "toInt()"),
    BaseTy.QScheme: ("at::QScheme", "toQScheme()"),
}

# Element types of `T?` read with IValue::toOptional<T>().
_OPTIONAL_ELEMENT: dict[BaseTy, str] = {
    BaseTy.Tensor: "at::Tensor",
    BaseTy.int: "int64_t",
    BaseTy.SymInt: "int64_t",
    BaseTy.float: "double",
    BaseTy.bool: "bool",
    BaseTy.str: "std::string_view",
    BaseTy.Scalar: "at::Scalar",
    BaseTy.ScalarType: "at::ScalarType",
    BaseTy.Layout: "at::Layout",
    BaseTy.Device: "at::Device",
    BaseTy.MemoryFormat: "at::MemoryFormat",
    BaseTy.Generator: "at::Generator",
    BaseTy.DeviceIndex: "c10::DeviceIndex",
}

_INT_LIKE = (BaseTy.int, BaseTy.SymInt)


def _is_base(t: Type, *names: BaseTy) -> bool:
    return isinstance(t, BaseType) and t.name in names


def _unbox_base(name: str, t: BaseType, ivalue: str, mutable: bool) -> UnboxedArgument:
    if t.name == BaseTy.Tensor:
        # A non-const lvalue IValue hands out a reference to its tensor: no refcount traffic.
        ref = "at::Tensor&" if mutable else "const at::Tensor&"
        return UnboxedArgument((f"{ref} {name} = {ivalue}.toTensor();",), name)
    if t.name == BaseTy.DeviceIndex:
        return UnboxedArgument(
            (f"const c10::DeviceIndex {name} = static_cast<c10::DeviceIndex>({ivalue}.toInt());",), name
        )
    if t.name not in _BASE_UNBOXING:
        raise UnsupportedType(f"no unboxing for schema type {t}")
    cpp_type, accessor = _BASE_UNBOXING[t.name]
    return UnboxedArgument((f"const {cpp_type} {name} = {ivalue}.{accessor};",), name)


def _unbox_optional(name: str, t: OptionalType, ivalue: str) -> UnboxedArgument:
    elem = t.elem
    if isinstance(elem, ListType):
        if _is_base(elem.elem, *_INT_LIKE):
            # OptionalIntArrayRef views storage that must outlive the call.
            return UnboxedArgument(
                (
                    f"const std::optional<at::DimVector> {name}_storage = optional_dim_vector({ivalue});",
                    f"const at::OptionalIntArrayRef {name} = optional_array_ref({name}_storage);",
                ),
                name,
            )
        if _is_base(elem.elem, BaseTy.float):
            return UnboxedArgument(
                (
                    f"const std::optional<std::vector<double>> {name}_storage = "
                    f"{ivalue}.toOptional<std::vector<double>>();",
                    f"const std::optional<at::ArrayRef<double>> {name} = optional_array_ref({name}_storage);",
                ),
                name,
            )
        raise UnsupportedType(f"no unboxing for schema type {t}")
    if isinstance(elem, BaseType):
        if elem.name in _OPTIONAL_ELEMENT:
            cpp = _OPTIONAL_ELEMENT[elem.name]
            return UnboxedArgument(
                (f"const std::optional<{cpp}> {name} = {ivalue}.toOptional<{cpp}>();",), name
            )
    raise UnsupportedType(f"no unboxing for schema type {t}")


def _unbox_list(name: str, t: ListType, ivalue: str, cpp_param_type: str) -> UnboxedArgument:
    elem = t.elem
    if _is_base(elem, *_INT_LIKE):
        return UnboxedArgument((f"const at::DimVector {name} = {ivalue}.toDimVector();",), name)
    if _is_base(elem, BaseTy.float):
        return UnboxedArgument((f"const std::vector<double> {name} = {ivalue}.toDoubleVector();",), name)
    if _is_base(elem, BaseTy.bool):
        if t.size is None:
            return UnboxedArgument((f"const std::vector<bool> {name} = {ivalue}.toBoolList().vec();",), name)
        return UnboxedArgument(
            (f"const std::array<bool, {t.size}> {name} = {ivalue}.to<std::array<bool, {t.size}>>();",), name
        )
    if _is_base(elem, BaseTy.Tensor):
        if "ITensorListRef" in cpp_param_type:
            # ITensorListRef wraps the IValue's own c10::List without copying the tensors.
            return UnboxedArgument((f"const c10::List<at::Tensor> {name} = {ivalue}.toTensorList();",), name)
        return UnboxedArgument((f"const std::vector<at::Tensor> {name} = {ivalue}.toTensorVector();",), name)
    if isinstance(elem, OptionalType) and _is_base(elem.elem, BaseTy.Tensor):
        return UnboxedArgument(
            (f"const c10::List<std::optional<at::Tensor>> {name} = optional_tensor_list({ivalue});",), name
        )
    if _is_base(elem, BaseTy.Scalar):
        return UnboxedArgument(
            (f"const std::vector<at::Scalar> {name} = {ivalue}.to<std::vector<at::Scalar>>();",), name
        )
    raise UnsupportedType(f"no unboxing for schema type {t}")


def unbox_argument(name: str, t: Type, ivalue: str, *, mutable: bool, cpp_param_type: str) -> UnboxedArgument:
    """C++ that reads schema argument `name` of type `t` from the IValue expression `ivalue`.

    `cpp_param_type` is the kernel parameter's C++ type as the installed headers declare it; it decides
    between representations where the schema type alone does not (Tensor[] as ITensorListRef or TensorList).
    """
    if isinstance(t, BaseType):
        return _unbox_base(name, t, ivalue, mutable)
    if isinstance(t, OptionalType):
        return _unbox_optional(name, t, ivalue)
    if isinstance(t, ListType):
        return _unbox_list(name, t, ivalue, cpp_param_type)
    raise UnsupportedType(f"no unboxing for schema type {t}")


_BOXABLE_RETURNS = (
    BaseTy.Tensor,
    BaseTy.bool,
    BaseTy.int,
    BaseTy.float,
    BaseTy.Scalar,
    BaseTy.ScalarType,
    BaseTy.QScheme,
    BaseTy.Layout,
    BaseTy.Device,
    BaseTy.MemoryFormat,
    BaseTy.SymInt,  # c10::SymInt boxes as an int when it is concrete, as it always is here
    BaseTy.SymBool,
)


def check_return_boxable(r: Return) -> None:
    """Raise UnsupportedType unless a kernel's result of this type can be put back on the stack as an IValue."""
    t = r.type
    if isinstance(t, BaseType) and t.name in _BOXABLE_RETURNS:
        return
    if isinstance(t, ListType) and _is_base(t.elem, BaseTy.Tensor):
        return
    raise UnsupportedType(f"no boxing for return type {t}")
