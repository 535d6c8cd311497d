"""The lightweight-dispatch code generator, as a library.

Stages, each a module:
  selection.py       which operators a build carries (the ops yaml)
  native_ops.py      the model of an operator: parsed schema and the kernel static dispatch picks
  cpp_types.py       how each schema type is unboxed from an IValue into the kernel's C++ type
  emit_unboxing.py   the emitters: generated C++ text from the model
  file_writer.py     writes generated files atomically and only when their content changed
  gen_unboxing.py    the command line that wires them together
"""
