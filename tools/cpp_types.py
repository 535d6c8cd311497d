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


# Scalar-like schema types: the C++ value type and the expression, applied to the IValue, that produces it.
# `to_*` are the out-of-line helpers in lightweight_dispatch/unboxing_helpers.h; rarely used types keep
# IValue's own accessor.
_BASE_UNBOXING: dict[BaseTy, tuple[str, str]] = {
    BaseTy.int: ("int64_t", "to_int({})"),
    BaseTy.SymInt: ("int64_t", "to_int({})"),  # the lite interpreter has no symbolic ints
    BaseTy.float: ("double", "to_double({})"),
    BaseTy.bool: ("bool", "to_bool({})"),
    BaseTy.str: ("std::string_view", "to_string_view({})"),
    BaseTy.Scalar: ("at::Scalar", "to_scalar({})"),
    BaseTy.ScalarType: ("at::ScalarType", "to_scalar_type({})"),
    BaseTy.Layout: ("at::Layout", "to_layout({})"),
    BaseTy.Device: ("at::Device", "to_device({})"),
    BaseTy.MemoryFormat: ("at::MemoryFormat", "to_memory_format({})"),
    BaseTy.Storage: ("at::Storage", "{}.toStorage()"),
    BaseTy.Stream: ("at::Stream", "{}.toStream()"),
    BaseTy.Generator: ("at::Generator", "{}.toGenerator()"),
    BaseTy.QScheme: ("at::QScheme", "{}.toQScheme()"),
}

# `T?` element types: the C++ element type and the helper that reads the optional (None or a value).
_OPTIONAL_ELEMENT: dict[BaseTy, tuple[str, str]] = {
    BaseTy.Tensor: ("at::Tensor", "to_optional_tensor({})"),
    BaseTy.int: ("int64_t", "to_optional_int({})"),
    BaseTy.SymInt: ("int64_t", "to_optional_int({})"),
    BaseTy.float: ("double", "to_optional_double({})"),
    BaseTy.bool: ("bool", "to_optional_bool({})"),
    BaseTy.str: ("std::string_view", "to_optional_string_view({})"),
    BaseTy.Scalar: ("at::Scalar", "to_optional_scalar({})"),
    BaseTy.ScalarType: ("at::ScalarType", "to_optional_scalar_type({})"),
    BaseTy.Layout: ("at::Layout", "to_optional_layout({})"),
    BaseTy.Device: ("at::Device", "to_optional_device({})"),
    BaseTy.MemoryFormat: ("at::MemoryFormat", "to_optional_memory_format({})"),
    BaseTy.Generator: ("at::Generator", "{}.toOptional<at::Generator>()"),
    BaseTy.DeviceIndex: ("c10::DeviceIndex", "{}.toOptional<c10::DeviceIndex>()"),
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
            (f"const c10::DeviceIndex {name} = static_cast<c10::DeviceIndex>(to_int({ivalue}));",), name
        )
    if t.name not in _BASE_UNBOXING:
        raise UnsupportedType(f"no unboxing for schema type {t}")
    cpp_type, reader = _BASE_UNBOXING[t.name]
    return UnboxedArgument((f"const {cpp_type} {name} = {reader.format(ivalue)};",), name)


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
                    f"const std::optional<std::vector<double>> {name}_storage = optional_double_vector({ivalue});",
                    f"const std::optional<at::ArrayRef<double>> {name} = optional_array_ref({name}_storage);",
                ),
                name,
            )
        raise UnsupportedType(f"no unboxing for schema type {t}")
    if isinstance(elem, BaseType):
        if elem.name in _OPTIONAL_ELEMENT:
            cpp, reader = _OPTIONAL_ELEMENT[elem.name]
            return UnboxedArgument((f"const std::optional<{cpp}> {name} = {reader.format(ivalue)};",), name)
    raise UnsupportedType(f"no unboxing for schema type {t}")


def _unbox_list(name: str, t: ListType, ivalue: str, cpp_param_type: str) -> UnboxedArgument:
    elem = t.elem
    if _is_base(elem, *_INT_LIKE):
        return UnboxedArgument((f"const at::DimVector {name} = to_dim_vector({ivalue});",), name)
    if _is_base(elem, BaseTy.float):
        return UnboxedArgument((f"const std::vector<double> {name} = to_double_vector({ivalue});",), name)
    if _is_base(elem, BaseTy.bool):
        if t.size is None:
            return UnboxedArgument((f"const std::vector<bool> {name} = {ivalue}.toBoolList().vec();",), name)
        return UnboxedArgument(
            (f"const std::array<bool, {t.size}> {name} = {ivalue}.to<std::array<bool, {t.size}>>();",), name
        )
    if _is_base(elem, BaseTy.Tensor):
        if "ITensorListRef" in cpp_param_type:
            # ITensorListRef wraps the IValue's own c10::List without copying the tensors.
            return UnboxedArgument((f"const c10::List<at::Tensor> {name} = to_tensor_list({ivalue});",), name)
        return UnboxedArgument((f"const std::vector<at::Tensor> {name} = to_tensor_vector({ivalue});",), name)
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


# TorchScript classes whose objects operator arguments carry, and the C++ class behind each
# (ATen/native/quantized/PackedParams.h).
CUSTOM_CLASSES: dict[str, str] = {
    "__torch__.torch.classes.quantized.Conv2dPackedParamsBase": "ConvPackedParamsBase<2>",
    "__torch__.torch.classes.quantized.Conv3dPackedParamsBase": "ConvPackedParamsBase<3>",
    "__torch__.torch.classes.quantized.LinearPackedParamsBase": "LinearPackedParamsBase",
}


def custom_class_cpp_type(qualified: str) -> str:
    if qualified not in CUSTOM_CLASSES:
        raise UnsupportedType(f"no C++ class known for the TorchScript class {qualified}")
    return CUSTOM_CLASSES[qualified]


def unbox_custom_class(name: str, cpp_class: str, ivalue: str) -> UnboxedArgument:
    """The object's C++ instance; toCustomClass checks the object's class."""
    return UnboxedArgument(
        (f"const c10::intrusive_ptr<{cpp_class}> {name} = {ivalue}.toCustomClass<{cpp_class}>();",), name
    )


def quantized_check(t: Type, ivalue: str) -> str | None:
    """A C++ condition true when the tensor(s) argument `ivalue` holds include a quantized one; None for others.

    A plain tensor is checked inline (one dispatch-key-set test on the float path); optional tensors and
    tensor lists go through the out-of-line helper (lightweight_dispatch/unboxing_helpers.h).
    """
    if _is_base(t, BaseTy.Tensor):
        return f"{ivalue}.toTensor().is_quantized()"
    if isinstance(t, OptionalType) and _is_base(t.elem, BaseTy.Tensor):
        return f"holds_quantized_tensor({ivalue})"
    if isinstance(t, ListType) and (
        _is_base(t.elem, BaseTy.Tensor) or (isinstance(t.elem, OptionalType) and _is_base(t.elem.elem, BaseTy.Tensor))
    ):
        return f"holds_quantized_tensor({ivalue})"
    return None
