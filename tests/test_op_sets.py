"""Op sets for users' own models: union from mixed sources, check against a build, and every bad input
refused with a clear message, a non-zero exit and the output file untouched."""
from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from predictor_runner import save_lite_model
from small_models import Erf, Relu, Softmax, model_dir, output  # noqa: F401 (fixtures)
from scripts import check_ops, dump_ops
from tools.selection import load_op_selection



def dump(*args: object) -> int:
    return dump_ops.main([str(a) for a in args])


def test_union_of_model_files_directories_and_yamls(model_dir: Path, tmp_path: Path, output: Path) -> None:
    erf_file = save_lite_model(Erf(), tmp_path / "erf_model.ptl")
    plain = tmp_path / "plain.yaml"
    plain.write_text("- aten::add.Tensor\n- aten::relu\n")
    assert dump("--model-file", model_dir, "--model-file", erf_file, "--ops-yaml", plain, "--output", output) == 0
    used_by = {op.name: op.used_by for op in load_op_selection(output).ops}
    assert used_by["aten::relu"] == ("relu_model", str(plain))
    assert used_by["aten::softmax.int"] == ("softmax_model",)
    assert used_by["aten::erf"] == ("erf_model",)
    assert used_by["aten::add.Tensor"] == (str(plain),)


def test_test_models_mix_with_model_files(model_dir: Path, output: Path, tmp_path: Path) -> None:
    assert dump("out_variants", "--model-file", model_dir / "relu_model.ptl", "--output", output,
                "--models-dir", tmp_path / "m") == 0
    used_by = {op.name: op.used_by for op in load_op_selection(output).ops}
    assert used_by["aten::add.out"] == ("out_variants",)
    assert used_by["aten::relu"] == ("relu_model",)


def test_jit_native_ops_are_marked(model_dir: Path, output: Path) -> None:
    class UsesSize(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            sizes = x.size()  # aten::size and list indexing are JIT-native
            return x.view(sizes[0], -1)

    save_lite_model(UsesSize(), model_dir / "size_model.ptl")
    assert dump("--model-file", model_dir / "size_model.ptl", "--output", output) == 0
    marked = sorted(line.split(": {")[0].strip() for line in output.read_text().splitlines()
                    if line.endswith("# JIT-native"))
    assert marked == ["aten::__getitem__.t", "aten::size"]


def expect_refusal(capsys: pytest.CaptureFixture[str], output: Path, *args: object) -> str:
    before = output.read_bytes()
    assert dump(*args, "--output", output) == 1
    assert output.read_bytes() == before
    return capsys.readouterr().err


def test_missing_path_is_refused(capsys: pytest.CaptureFixture[str], output: Path, tmp_path: Path) -> None:
    err = expect_refusal(capsys, output, "--model-file", tmp_path / "nope.ptl")
    assert "nope.ptl: no such file or directory" in err


def test_non_model_file_is_refused(capsys: pytest.CaptureFixture[str], output: Path, tmp_path: Path) -> None:
    text = tmp_path / "notes.ptl"
    text.write_text("hello")
    assert "notes.ptl: not a lite-interpreter model (not a zip archive)" in expect_refusal(
        capsys, output, "--model-file", text)


def test_empty_file_is_refused(capsys: pytest.CaptureFixture[str], output: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.ptl"
    empty.write_bytes(b"")
    assert "empty.ptl: the file is empty" in expect_refusal(capsys, output, "--model-file", empty)


def test_truncated_model_is_refused(
    capsys: pytest.CaptureFixture[str], output: Path, model_dir: Path, tmp_path: Path
) -> None:
    data = (model_dir / "relu_model.ptl").read_bytes()
    truncated = tmp_path / "truncated.ptl"
    truncated.write_bytes(data[: len(data) // 2])
    err = expect_refusal(capsys, output, "--model-file", truncated)
    assert "truncated.ptl: not a lite-interpreter model (not a zip archive)" in err


def test_corrupted_zip_record_is_refused(
    capsys: pytest.CaptureFixture[str], output: Path, model_dir: Path, tmp_path: Path
) -> None:
    corrupted = tmp_path / "corrupted.ptl"
    shutil.copy(model_dir / "relu_model.ptl", corrupted)
    with zipfile.ZipFile(corrupted) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("bytecode.pkl"))
    data = bytearray(corrupted.read_bytes())
    # The local header's own name and extra-field lengths (PyTorch pads local extras for alignment).
    name_length = int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little")
    extra_length = int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    payload = info.header_offset + 30 + name_length + extra_length
    data[payload + 2] ^= 0xFF  # flip a byte inside the stored bytecode record
    corrupted.write_bytes(bytes(data))
    err = expect_refusal(capsys, output, "--model-file", corrupted)
    assert "corrupted.ptl: corrupt zip archive" in err and "bytecode.pkl" in err


def test_torchscript_zip_without_bytecode_is_refused(
    capsys: pytest.CaptureFixture[str], output: Path, tmp_path: Path
) -> None:
    full_jit = tmp_path / "full_jit.ptl"
    torch.jit.save(torch.jit.script(Relu()), str(full_jit))
    err = expect_refusal(capsys, output, "--model-file", full_jit)
    assert "without lite-interpreter bytecode" in err and "_save_for_lite_interpreter" in err


def test_unparsable_yaml_names_the_line(capsys: pytest.CaptureFixture[str], output: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("operators:\n  aten::add.Tensor: {}\n  aten::mul: x: y\n")
    assert "bad.yaml:3: not valid YAML" in expect_refusal(capsys, output, "--ops-yaml", bad)


def test_unknown_op_suggests_close_matches(capsys: pytest.CaptureFixture[str], output: Path, tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("- aten::add.Tensor\n- aten::conv_2d\n")
    err = expect_refusal(capsys, output, "--ops-yaml", typo)
    assert "aten::conv_2d is not an operator of the installed torch; did you mean" in err
    assert "aten::conv2d" in err


def test_empty_selection_is_refused(capsys: pytest.CaptureFixture[str], output: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("[]\n")
    assert "refusing to write an empty selection" in expect_refusal(capsys, output, "--ops-yaml", empty)


def test_directory_without_models_is_refused(capsys: pytest.CaptureFixture[str], output: Path, tmp_path: Path) -> None:
    (tmp_path / "nothing").mkdir()
    assert "a directory with no .ptl files" in expect_refusal(capsys, output, "--model-file", tmp_path / "nothing")


# check_ops against a yaml
def test_check_lists_missing_ops_as_yaml_entries(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    yaml_path = tmp_path / "build.yaml"
    yaml_path.write_text("- aten::relu\n- aten::mul.Scalar\n- aten::sigmoid\n")
    assert check_ops.main(["--ops-yaml", str(yaml_path), str(model_dir)]) == 1
    out = capsys.readouterr().out
    assert "missing: 1 operator(s)" in out
    assert ("  aten::softmax.int: {is_root_operator: true, is_used_for_training: false, "
            "include_all_overloads: false, debug_info: [softmax_model]}") in out
    assert "unused: 1 operator(s)" in out and "  aten::sigmoid" in out


def test_check_passes_when_nothing_is_missing(model_dir: Path, tmp_path: Path) -> None:
    yaml_path = tmp_path / "build.yaml"
    yaml_path.write_text("- aten::relu\n- aten::mul.Scalar\n- aten::softmax.int\n")
    assert check_ops.main(["--ops-yaml", str(yaml_path), str(model_dir)]) == 0


def test_check_against_the_built_predictor(predictor: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    erf_file = save_lite_model(Erf(), tmp_path / "erf_model.ptl")
    assert check_ops.main(["--predictor", str(predictor), str(erf_file)]) == 1
    assert "aten::erf: {" in capsys.readouterr().out
    relu_file = save_lite_model(Relu(), tmp_path / "relu_model.ptl")  # relu and mul.Scalar are in the build
    assert check_ops.main(["--predictor", str(predictor), str(relu_file)]) == 0


def test_check_refuses_a_bad_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.ptl"
    bad.write_text("x")
    assert check_ops.main(["--ops-yaml", str(tmp_path / "x.yaml"), str(bad)]) == 2
    assert "not a zip archive" in capsys.readouterr().err


# quantized models: their operators are neither JIT-native nor silently missing


def test_check_names_the_ops_a_build_calls_through_the_dispatcher(
    predictor: Path, models_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = models_dir / "quantized_detection_head.ptl"
    assert check_ops.main(["--predictor", str(predictor), str(model)]) == 0
    out = capsys.readouterr().out
    assert "through the dispatcher: 3 operator(s) the build carries but calls through the c10 dispatcher:" in out
    assert "  quantized::cat: LibTorch exports no entry point" in out
    assert "quantized::conv2d.new" not in out.split("through the dispatcher:")[1]  # static: a packed-weight method


def test_check_against_a_yaml_names_dispatcher_ops_from_quantized_ops_yaml(
    models_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    yaml_path = Path(__file__).resolve().parent.parent / "lightweight_dispatch_ops.yaml"
    assert check_ops.main(["--ops-yaml", str(yaml_path), str(models_dir / "quantized_lstm.ptl")]) == 0
    assert "  aten::quantized_lstm.input: LibTorch exports no entry point" in capsys.readouterr().out


def test_a_quantized_op_missing_from_the_build_is_reported_missing_not_jit_native(
    models_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    yaml_path = tmp_path / "float_only.yaml"
    yaml_path.write_text("- aten::dequantize.self\n")
    assert check_ops.main(["--ops-yaml", str(yaml_path), str(models_dir / "quantized_mobilenet_v2.ptl")]) == 1
    out = capsys.readouterr().out
    assert "  quantized::conv2d.new: {" in out  # a missing op, printed as the yaml entry to add
    jit_line = next(line for line in out.splitlines() if line.startswith("JIT-native"))
    assert "aten::size" in jit_line and "quantized::" not in jit_line


def test_dump_ops_marks_quantized_ops_as_dispatcher_ops(models_dir: Path, output: Path) -> None:
    assert dump_ops.main(["--model-file", str(models_dir / "quantized_mobilenet_v2.ptl"), "--output", str(output)]) == 0
    lines = {line.split(": {")[0].strip(): line for line in output.read_text().splitlines() if ": {" in line}
    assert lines["quantized::add"].endswith("# dispatcher op, not native")
    assert lines["aten::size"].endswith("# JIT-native")
    assert lines["aten::dequantize.self"].endswith("}")
