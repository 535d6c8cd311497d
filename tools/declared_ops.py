"""Reading the project's operator declarations (custom_ops.yaml, quantized_ops.yaml): a yaml list of entries."""
from __future__ import annotations

from pathlib import Path

import yaml


def load_entries(path: Path, error: type[ValueError]) -> list[object]:
    """The file's entries; `error` (naming the file) when it is not a yaml list."""
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    if not isinstance(entries, list):
        raise error(f"{path}: expected a list of operators")
    return entries
