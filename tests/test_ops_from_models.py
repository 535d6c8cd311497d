"""tools/ops_from_models.py, the build step behind SELECTED_MODELS and lightweight_dispatch_add_kernels(MODELS):
the yaml dump_ops writes for the same files, every bad input refused with the file and the reason and the
output untouched, and nothing needed beyond what the installed package ships."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Callable

import pytest
import torch

from predictor_runner import save_lite_model
from small_models import Erf, Relu, Softmax, model_dir, output  # noqa: F401 (fixtures)
from scripts import dump_ops
from tools import ops_from_models
from tools.selection import load_op_selection

REPO_ROOT = Path(__file__).resolve().parent.parent


def run_tool(*args: object) -> int:
    return ops_from_models.main([str(a) for a in args])


def test_writes_what_dump_ops_writes_for_the_same_files(model_dir: Path, tmp_path: Path) -> None:
    erf_file = save_lite_model(Erf(), tmp_path / "erf_model.ptl")
    extra = tmp_path / "extra.yaml"
    extra.write_text("- aten::add.Tensor\n- aten::relu\n")
    sources = ["--model-file", erf_file, "--model-file", model_dir, "--ops-yaml", extra]
    assert run_tool(*sources, "--output", tmp_path / "tool.yaml") == 0
    assert dump_ops.main([str(a) for a in [*sources, "--output", tmp_path / "dumped.yaml"]]) == 0
    assert (tmp_path / "tool.yaml").read_text() == (tmp_path / "dumped.yaml").read_text()
    used_by = {op.name: op.used_by for op in load_op_selection(tmp_path / "tool.yaml").ops}
    assert used_by["aten::relu"] == ("relu_model", str(extra))
    assert used_by["aten::erf"] == ("erf_model",)


def test_two_models_with_one_stem_keep_both_their_operators(model_dir: Path, tmp_path: Path, output: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    save_lite_model(Erf(), other / "relu_model.ptl")
    assert run_tool("--model-file", model_dir, "--model-file", other, "--output", output) == 0
    ops = {op.name: op.used_by for op in load_op_selection(output).ops}
    assert ops["aten::relu"] == ("relu_model",) and ops["aten::erf"] == ("relu_model",)


def test_unchanged_operators_leave_the_output_file_as_it_was(model_dir: Path, output: Path) -> None:
    assert run_tool("--model-file", model_dir, "--output", output) == 0
    before = output.stat().st_mtime_ns
    save_lite_model(Relu(), model_dir / "relu_model.ptl")  # the same model saved again: same operators
    assert run_tool("--model-file", model_dir, "--output", output) == 0
    assert output.stat().st_mtime_ns == before  # so the kernels' codegen step does not re-run


def _corrupt_bytecode_record(model: Path) -> None:
    with zipfile.ZipFile(model) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("bytecode.pkl"))
    data = bytearray(model.read_bytes())
    name_length = int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little")
    extra_length = int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    data[info.header_offset + 30 + name_length + extra_length + 2] ^= 0xFF
    model.write_bytes(bytes(data))


def _missing(tmp: Path) -> Path:
    return tmp / "absent.ptl"


def _empty(tmp: Path) -> Path:
    (tmp / "empty.ptl").write_bytes(b"")
    return tmp / "empty.ptl"


def _not_a_zip(tmp: Path) -> Path:
    (tmp / "notes.ptl").write_text("hello")
    return tmp / "notes.ptl"


def _corrupt_zip(tmp: Path) -> Path:
    model = save_lite_model(Relu(), tmp / "corrupted.ptl")
    _corrupt_bytecode_record(model)
    return model


def _without_bytecode(tmp: Path) -> Path:
    torch.jit.save(torch.jit.script(Relu()), str(tmp / "full_jit.ptl"))
    return tmp / "full_jit.ptl"


def _directory_without_models(tmp: Path) -> Path:
    (tmp / "nothing").mkdir()
    (tmp / "nothing" / "readme.txt").write_text("no models here")
    return tmp / "nothing"


@pytest.mark.parametrize(
    ("make_input", "reason"),
    [
        (_missing, "no such file or directory"),
        (_empty, "the file is empty"),
        (_not_a_zip, "not a lite-interpreter model (not a zip archive)"),
        (_corrupt_zip, "corrupt zip archive"),
        (_without_bytecode, "a zip without lite-interpreter bytecode (bytecode.pkl); save the model with "
                            "_save_for_lite_interpreter"),
        (_directory_without_models, "a directory with no .ptl files"),
    ],
    ids=["missing", "empty", "not_a_zip", "corrupt_zip", "without_bytecode", "directory_without_models"],
)
def test_a_bad_input_exits_1_naming_the_file_and_leaves_the_output_untouched(
    make_input: Callable[[Path], Path], reason: str, model_dir: Path, output: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = make_input(tmp_path)
    before = output.read_bytes()
    assert run_tool("--model-file", model_dir, "--model-file", bad, "--output", output) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ops_from_models: error: {bad}: {reason}"), err
    assert f"(nothing written to {output})" in err
    assert output.read_bytes() == before
    assert [p.name for p in output.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_an_unknown_operator_in_an_ops_yaml_is_refused(model_dir: Path, output: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("- aten::conv_2d\n")
    before = output.read_bytes()
    assert run_tool("--model-file", model_dir, "--ops-yaml", typo, "--output", output) == 1
    assert f"{typo}: aten::conv_2d is not an operator of the installed torch; did you mean" in capsys.readouterr().err
    assert output.read_bytes() == before


def test_runs_from_the_installed_layout_without_scripts_or_test_models(model_dir: Path, tmp_path: Path) -> None:
    # <prefix>/share/lightweight_dispatch as cmake/install.cmake lays it out: tools/*.py and the two yamls.
    share = tmp_path / "share"
    (share / "tools").mkdir(parents=True)
    for module in (REPO_ROOT / "tools").glob("*.py"):
        shutil.copy(module, share / "tools")
    for yaml_name in ("custom_ops.yaml", "quantized_ops.yaml"):
        shutil.copy(REPO_ROOT / yaml_name, share)
    output = tmp_path / "installed.yaml"
    run = subprocess.run([sys.executable, "-m", "tools.ops_from_models", "--model-file", str(model_dir),
                          "--output", str(output)], cwd=share, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"ops_from_models: 3 operators from 2 source(s) written to {output}\n"
    assert load_op_selection(output).names == {"aten::relu", "aten::mul.Scalar", "aten::softmax.int"}
