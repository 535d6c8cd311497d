"""The user's path through the README: three models exported elsewhere, one configure with SELECTED_MODELS
(a file and a directory) and one build, all three run, another model checked against it, and changed models
re-dumped by the build: a replaced model's new operators recompile their shards only, a model added to the
directory joins, and nothing changed does no work."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from predictor_runner import lite_module_ops, run_predictor, save_lite_model
from scripts import check_ops
from tools.emit_unboxing import shard_of
from tools.selection import load_op_selection

REPO_ROOT = Path(__file__).resolve().parent.parent
TOOL_DIR = Path(sys.executable).parent
CMAKE = str(TOOL_DIR / "cmake") if (TOOL_DIR / "cmake").exists() else "cmake"
NINJA = str(TOOL_DIR / "ninja") if (TOOL_DIR / "ninja").exists() else "ninja"


class Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.relu(self.linear(x)), dim=-1)


class Gate(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * y + torch.tanh(y)


class Pool(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = torch.max(x, dim=1)
        return torch.mean(x, dim=[2, 3]), indices.to(torch.float32) + values.sum()


class PoolErf(torch.nn.Module):
    """Pool's replacement: two operators more (aten::erf, aten::mul.Scalar)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = torch.max(x, dim=1)
        return torch.erf(torch.mean(x, dim=[2, 3])) * 2.0, indices.to(torch.float32) + values.sum()


class Erf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.erf(x) * 2.0


class Cosine(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cos(x)


def export_with_io(module: torch.nn.Module, inputs: list[torch.Tensor], path: Path) -> Path:
    """What a user has: a .ptl plus inputs and eager outputs saved beside it."""
    torch.manual_seed(0)
    module = module.eval()
    save_lite_model(module, path)
    with torch.no_grad():
        outputs = module(*inputs)
    torch.save(inputs, path.with_suffix(".inputs.pt"))
    torch.save(list(outputs) if isinstance(outputs, tuple) else [outputs], path.with_suffix(".expected.pt"))
    return path


@pytest.fixture(scope="module")
def user_build(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A directory of two models and one model beside it, built as the README says: SELECTED_MODELS="a.ptl;dir/"."""
    root = tmp_path_factory.mktemp("user")
    generator = torch.Generator().manual_seed(3)
    models = root / "exported"
    models.mkdir()
    torch.manual_seed(0)
    export_with_io(Classifier(), [torch.randn(2, 8, generator=generator)], models / "classifier.ptl")
    export_with_io(Gate(), [torch.randn(5, generator=generator), torch.randn(5, generator=generator)],
                   models / "gate.ptl")
    export_with_io(Pool(), [torch.randn(1, 3, 4, 4, generator=generator)], root / "pool.ptl")
    build = root / "build"
    configured = subprocess.run(
        [CMAKE, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={NINJA}", "-S", str(REPO_ROOT), "-B", str(build),
         f"-DPython3_EXECUTABLE={sys.executable}", f"-DSELECTED_MODELS={root / 'pool.ptl'};{models}/"],
        check=True, capture_output=True, text=True, timeout=300,
    )
    (root / "configure.log").write_text(configured.stdout)
    subprocess.run([NINJA, "-C", str(build), "lite_predictor"], check=True, capture_output=True, timeout=1800)
    return {"root": root, "models": models, "build": build, "selected": build / "generated_kernels_selected_ops.yaml"}


def model_path(user_build: dict[str, Path], name: str) -> Path:
    return user_build["root"] / "pool.ptl" if name == "pool" else user_build["models"] / f"{name}.ptl"


def rebuild(user_build: dict[str, Path]) -> str:
    return subprocess.run([NINJA, "-C", str(user_build["build"]), "-v", "lite_predictor"], check=True,
                          capture_output=True, text=True, timeout=900).stdout


def compiled_files(ninja_output: str) -> list[str]:
    """The sources a verbose ninja run compiled, by path relative to the source tree or build directory."""
    return re.findall(r" -c (\S+\.cpp)", ninja_output)


def listed_ops(user_build: dict[str, Path]) -> list[str]:
    return subprocess.run([str(user_build["build"] / "lite_predictor"), "--list-ops"], capture_output=True,
                          text=True, check=True).stdout.split()


@pytest.mark.parametrize("name", ["classifier", "gate", "pool"])
def test_each_user_model_runs_statically_and_matches(user_build: dict[str, Path], name: str) -> None:
    run = run_predictor(user_build["build"] / "lite_predictor", model_path(user_build, name), "--json")
    assert run.returncode == 0, run.stderr
    report = run.json()
    assert report["outputs_match"] is True
    assert "static" in {op["path"] for op in report["ops"]}
    assert {op["path"] for op in report["ops"]} <= {"static", "jit"}


def test_the_configure_names_the_yaml_it_dumps_the_models_operators_into(user_build: dict[str, Path]) -> None:
    log = " ".join((user_build["root"] / "configure.log").read_text().split())
    assert (f"generated_kernels's operators: the union of 3 model file(s), written at build time to "
            f"{user_build['selected']}") in log


def test_the_selection_is_the_union_of_the_models_operators(user_build: dict[str, Path]) -> None:
    union: set[str] = set()
    for name in ("classifier", "gate", "pool"):
        union |= lite_module_ops(model_path(user_build, name))
    selection = load_op_selection(user_build["selected"])
    assert selection.names == union
    assert dict((op.name, op.used_by) for op in selection.ops)["aten::sigmoid"] == ("gate",)


def test_the_build_carries_exactly_the_union(user_build: dict[str, Path]) -> None:
    listed = listed_ops(user_build)
    assert "aten::softmax.int" in listed and "aten::sigmoid" in listed and "aten::max.dim" in listed
    assert "aten::conv2d" not in listed  # not used by these three models


def test_rebuilding_with_nothing_changed_does_no_work(user_build: dict[str, Path]) -> None:
    output = rebuild(user_build)
    assert "ninja: no work to do." in output, output[-3000:]
    assert "ops_from_models" not in output and "gen_unboxing" not in output


def test_a_touched_model_is_re_dumped_and_recompiles_nothing(user_build: dict[str, Path]) -> None:
    model_path(user_build, "gate").touch()
    output = rebuild(user_build)
    assert "-m tools.ops_from_models" in output
    assert "unchanged in" in output  # the same operators: the yaml keeps its timestamp...
    assert "gen_unboxing" not in output and compiled_files(output) == []  # ...so no codegen and no compile


def test_another_model_is_checked_against_the_build(
    user_build: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    erf = save_lite_model(Erf(), user_build["root"] / "erf.ptl")
    assert check_ops.main(["--predictor", str(user_build["build"] / "lite_predictor"), str(erf)]) == 1
    assert "  aten::erf: {" in capsys.readouterr().out


def test_a_replaced_model_with_new_operators_recompiles_only_their_shards(user_build: dict[str, Path]) -> None:
    generator = torch.Generator().manual_seed(4)
    pool = export_with_io(PoolErf(), [torch.randn(1, 3, 4, 4, generator=generator)], user_build["root"] / "pool.ptl")
    output = rebuild(user_build)
    compiled = sorted({Path(path).stem for path in compiled_files(output) if "/generated/" in path})
    # PoolErf adds two operators (erf, mul.Scalar): their shards and the table recompile, nothing else.
    new_shards = {f"UnboxingShard_{shard_of(op, 4)}" for op in ("aten::erf", "aten::mul.Scalar")}
    assert compiled == sorted({"KernelTable"} | new_shards), output[-3000:]
    assert len(compiled_files(output)) == len(compiled)  # no runtime or main.cpp recompiles either
    assert {"aten::erf", "aten::mul.Scalar"} <= load_op_selection(user_build["selected"]).names
    run = run_predictor(user_build["build"] / "lite_predictor", pool, "--dispatch", "static", "--json")
    assert run.returncode == 0, run.stderr
    assert run.json()["outputs_match"] is True


def test_a_model_added_to_the_directory_joins_the_build(user_build: dict[str, Path]) -> None:
    save_lite_model(Cosine(), user_build["models"] / "cosine.ptl")
    output = rebuild(user_build)
    # The directory is globbed at configure time and re-checked by every build: a new file re-runs CMake.
    assert "--regenerate-during-build" in output
    used_by = {op.name: op.used_by for op in load_op_selection(user_build["selected"]).ops}
    assert used_by["aten::cos"] == ("cosine",)
    assert "aten::cos" in listed_ops(user_build)
