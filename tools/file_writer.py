"""Write generated files so that builds stay incremental and failures leave nothing half-written."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, content: str) -> None:
    """Replace `path` with `content` through a temporary file and a rename.

    A reader (or a build interrupted half way) sees either the old file or the new one, never a mix.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as tmp:
            tmp.write(content)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def write_if_changed(path: Path, content: str) -> bool:
    """Write `content` to `path` unless it already holds exactly that. Returns whether it wrote.

    Leaving an unchanged file untouched keeps its timestamp, so the build system recompiles nothing.
    """
    try:
        if path.read_text(encoding="utf-8") == content:
            return False
    except FileNotFoundError:
        pass
    write_atomically(path, content)
    return True
