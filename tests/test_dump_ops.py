"""scripts/dump_ops.py: the committed yaml follows the models, and a failure never corrupts it."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from scripts import dump_ops
from test_models import registry
from test_models.registry import ModelSpec
from tools.selection import load_op_selection

REPO_ROOT = Path(__file__).resolve().parent.parent
OPS_YAML = REPO_ROOT / "lightweight_dispatch_ops.yaml"


class Softplus(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(x)


def softplus_spec() -> ModelSpec:
    return ModelSpec("softplus_model", Softplus, lambda: (torch.randn(4),), freeze=False)


@pytest.fixture()
def yaml_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "ops.yaml"
    shutil.copy(OPS_YAML, copy)
    return copy


def test_committed_yaml_is_up_to_date(yaml_copy: Path, tmp_path: Path) -> None:
    assert dump_ops.main(["--check", "--output", str(yaml_copy), "--models-dir", str(tmp_path / "m")]) == 0


def test_adding_a_model_with_a_new_op_makes_check_fail(
    yaml_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(registry.MODELS, "softplus_model", softplus_spec())
    before = yaml_copy.read_text()
    assert dump_ops.main(["--check", "--output", str(yaml_copy), "--models-dir", str(tmp_path / "m")]) == 1
    out = capsys.readouterr().out
    assert "is stale" in out
    assert "+  aten::softplus: {" in out and "debug_info: [softplus_model]" in out
    assert yaml_copy.read_text() == before  # --check writes nothing
    assert not (tmp_path / "m").exists()


def test_dump_writes_union_with_the_models_that_use_each_op(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry.MODELS, "softplus_model", softplus_spec())
    output = tmp_path / "ops.yaml"
    assert dump_ops.main(["--output", str(output), "--models-dir", str(tmp_path / "m")]) == 0
    ops = {op.name: op.used_by for op in load_op_selection(output).ops}
    assert ops["aten::softplus"] == ("softplus_model",)
    assert "mobilenet_v2" in ops["aten::conv2d"] and "softplus_model" not in ops["aten::conv2d"]
    for suffix in (".ptl", ".inputs.pt", ".expected.pt"):
        assert (tmp_path / "m" / f"softplus_model{suffix}").is_file()


def test_failing_model_leaves_the_previous_yaml_intact(
    yaml_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> torch.nn.Module:
        raise RuntimeError("model construction failed half way")

    monkeypatch.setitem(registry.MODELS, "zz_broken", ModelSpec("zz_broken", broken, lambda: ()))
    before = yaml_copy.read_bytes()
    with pytest.raises(RuntimeError, match="half way"):
        dump_ops.main(["--output", str(yaml_copy), "--models-dir", str(tmp_path / "m")])
    assert yaml_copy.read_bytes() == before
    assert [p.name for p in yaml_copy.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_model_file_ops_are_attributed_to_its_stem(tmp_path: Path) -> None:
    scripted = torch.jit.script(Softplus())
    model_file = tmp_path / "user_model.ptl"
    model_file.write_bytes(scripted._save_to_buffer_for_lite_interpreter())
    output = tmp_path / "ops.yaml"
    assert dump_ops.main(["--model-file", str(model_file), "--output", str(output)]) == 0
    assert {op.name: op.used_by for op in load_op_selection(output).ops} == {"aten::softplus": ("user_model",)}


def test_unknown_model_name_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert dump_ops.main(["no_such_model", "--output", str(tmp_path / "o.yaml")]) == 1
    assert "unknown test model 'no_such_model'" in capsys.readouterr().err
    assert not (tmp_path / "o.yaml").exists()
