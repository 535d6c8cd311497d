"""The operators a lite-interpreter model (.ptl) calls, read from the file with its problems named.

The file is checked as a zip with a bytecode record before torch sees it, so a wrong or corrupted
file gets a message about the file rather than an interpreter stack trace.
"""
from __future__ import annotations

import io
import zipfile
from pathlib import Path


class ModelFileError(ValueError):
    """A model file that cannot be read, with the path and what is wrong with it."""


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def check_lite_model_bytes(data: bytes, source: str) -> None:
    """Raise ModelFileError unless `data` looks like a lite-interpreter model: a sound zip with bytecode."""
    if not data:
        raise ModelFileError(f"{source}: the file is empty")
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise ModelFileError(f"{source}: not a lite-interpreter model (not a zip archive)")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = archive.namelist()
            broken = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
        raise ModelFileError(f"{source}: corrupt zip archive: {_first_line(error)}") from None
    if broken is not None:
        raise ModelFileError(f"{source}: corrupt zip archive: record {broken} fails its checksum")
    if not any(name.endswith("/bytecode.pkl") or name == "bytecode.pkl" for name in names):
        raise ModelFileError(
            f"{source}: a zip without lite-interpreter bytecode (bytecode.pkl); save the model with "
            "_save_for_lite_interpreter, not torch.jit.save"
        )


def ops_of_lite_model_bytes(data: bytes, source: str) -> frozenset[str]:
    """Exact `namespace::name.overload` of every operator the model's bytecode calls."""
    check_lite_model_bytes(data, source)
    from torch.jit.mobile import _export_operator_list, _load_for_lite_interpreter

    try:
        module = _load_for_lite_interpreter(io.BytesIO(data))
    except Exception as error:  # torch raises RuntimeError and its own subclasses for unusable models
        raise ModelFileError(f"{source}: cannot load as a lite-interpreter model: {_first_line(error)}") from None
    return frozenset(_export_operator_list(module))


def lite_model_files(path: Path) -> list[Path]:
    """`path` itself, or the .ptl files directly inside it if it is a directory."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".ptl" and p.is_file())
        if not files:
            raise ModelFileError(f"{path}: a directory with no .ptl files")
        return files
    if not path.exists():
        raise ModelFileError(f"{path}: no such file or directory")
    return [path]


def ops_of_lite_model_file(path: Path) -> frozenset[str]:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ModelFileError(f"{path}: cannot read: {error.strerror}") from None
    return ops_of_lite_model_bytes(data, str(path))
