"""The folders are the architecture (docs/architecture.md): which folder's C++ may include which. Read from the
sources, so a change that reaches into another part's internals fails here with the file and the include."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT_FOLDERS = ("lightweight_dispatch", "runtime", "bind_time", "kernel_support", "custom_kernels",
                   "lite_predictor", "benchmarks")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)

# For each folder, the project headers its files may include (folder prefixes or exact headers).
ALLOWED: dict[str, tuple[str, ...]] = {
    "include/lightweight_dispatch": ("lightweight_dispatch/",),
    "kernel_support": ("lightweight_dispatch/",),
    "custom_kernels": ("lightweight_dispatch/", "custom_kernels/"),
    # The runtime reaches the stage through its one interface.
    "runtime": ("lightweight_dispatch/", "runtime/", "bind_time/stage.h"),
    # The stage uses the runtime's binding interfaces, never the Model behind the public API or the CLI.
    "bind_time": ("lightweight_dispatch/bind_time_report.h", "bind_time/", "runtime/op_binding.h",
                  "runtime/tensor_tree.h"),
    "lite_predictor": ("lightweight_dispatch/", "lite_predictor/"),
    "benchmarks": ("lightweight_dispatch/", "benchmarks/"),
    "examples": ("lightweight_dispatch/",),
}


def project_includes_text(text: str) -> list[str]:
    return [name for name in INCLUDE.findall(text) if name.split("/")[0] in PROJECT_FOLDERS]


def project_includes(path: Path) -> list[str]:
    return project_includes_text(path.read_text())


def sources(folder: str) -> list[Path]:
    root = REPO_ROOT / folder
    return sorted(p for p in root.rglob("*") if p.suffix in {".h", ".cpp"})


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_a_folder_includes_only_what_its_layer_may(folder: str) -> None:
    assert sources(folder), f"{folder} has no C++ sources: the table above is stale"
    violations = [
        f"{path.relative_to(REPO_ROOT)}: #include <{name}>"
        for path in sources(folder)
        for name in project_includes(path)
        if not name.startswith(ALLOWED[folder])
    ]
    assert violations == []


def test_the_stage_is_reached_only_through_stage_h() -> None:
    reaching = sorted(
        f"{path.relative_to(REPO_ROOT)}: {name}"
        for folder in ALLOWED if folder != "bind_time"
        for path in sources(folder)
        for name in project_includes(path)
        if name.startswith("bind_time/")
    )
    assert reaching == ["runtime/runtime.cpp: bind_time/stage.h"]


def test_the_include_check_sees_a_violation() -> None:
    # The checker itself: a stage header including the public API would be refused.
    assert not "lightweight_dispatch/runtime.h".startswith(ALLOWED["bind_time"])
    assert project_includes_text('#include <lightweight_dispatch/runtime.h>\n#include <vector>\n') == [
        "lightweight_dispatch/runtime.h"]


def test_public_headers_live_only_in_include() -> None:
    headers = {p.relative_to(REPO_ROOT).as_posix() for p in REPO_ROOT.glob("include/**/*.h")}
    assert headers and all(h.startswith("include/lightweight_dispatch/") for h in headers)
