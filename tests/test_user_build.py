"""The user's path through the README: three models exported elsewhere, their union, a predictor built
for exactly that set, all three run, another model checked against it, and a one-op change that
recompiles one shard."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from predictor_runner import run_predictor, save_lite_model
from scripts import check_ops, dump_ops
from tools.emit_unboxing import shard_of

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


class Erf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.erf(x) * 2.0


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
    root = tmp_path_factory.mktemp("user")
    generator = torch.Generator().manual_seed(3)
    models = root / "exported"
    models.mkdir()
    torch.manual_seed(0)
    export_with_io(Classifier(), [torch.randn(2, 8, generator=generator)], models / "classifier.ptl")
    export_with_io(Gate(), [torch.randn(5, generator=generator), torch.randn(5, generator=generator)],
                   models / "gate.ptl")
    export_with_io(Pool(), [torch.randn(1, 3, 4, 4, generator=generator)], models / "pool.ptl")
    ops_yaml = root / "user_ops.yaml"
    assert dump_ops.main(["--model-file", str(models), "--output", str(ops_yaml)]) == 0
    build = root / "build"
    subprocess.run(
        [CMAKE, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={NINJA}", "-S", str(REPO_ROOT), "-B", str(build),
         f"-DPython3_EXECUTABLE={sys.executable}", f"-DSELECTED_OP_LIST={ops_yaml}"],
        check=True, capture_output=True, timeout=300,
    )
    subprocess.run([NINJA, "-C", str(build), "lite_predictor"], check=True, capture_output=True, timeout=1200)
    return {"root": root, "models": models, "ops_yaml": ops_yaml, "build": build}


@pytest.mark.parametrize("name", ["classifier", "gate", "pool"])
def test_each_user_model_runs_statically_and_matches(user_build: dict[str, Path], name: str) -> None:
    run = run_predictor(user_build["build"] / "lite_predictor", user_build["models"] / f"{name}.ptl", "--json")
    assert run.returncode == 0, run.stderr
    report = run.json()
    assert report["outputs_match"] is True
    assert "static" in {op["path"] for op in report["ops"]}
    assert {op["path"] for op in report["ops"]} <= {"static", "jit"}


def test_the_build_carries_exactly_the_union(user_build: dict[str, Path]) -> None:
    listed = subprocess.run([str(user_build["build"] / "lite_predictor"), "--list-ops"], capture_output=True,
                            text=True, check=True).stdout.split()
    assert "aten::softmax.int" in listed and "aten::sigmoid" in listed and "aten::max.dim" in listed
    assert "aten::conv2d" not in listed  # not used by these three models


def test_another_model_is_checked_against_the_build(
    user_build: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    erf = save_lite_model(Erf(), user_build["root"] / "erf.ptl")
    assert check_ops.main(["--predictor", str(user_build["build"] / "lite_predictor"), str(erf)]) == 1
    assert "  aten::erf: {" in capsys.readouterr().out


def test_one_op_change_recompiles_one_shard(user_build: dict[str, Path]) -> None:
    erf = user_build["root"] / "erf.ptl"
    if not erf.exists():
        save_lite_model(Erf(), erf)
    yaml_path = user_build["ops_yaml"]
    assert dump_ops.main(["--ops-yaml", str(yaml_path), "--model-file", str(erf), "--output", str(yaml_path)]) == 0
    rebuilt = subprocess.run([NINJA, "-C", str(user_build["build"]), "-v", "lite_predictor"], check=True,
                             capture_output=True, text=True, timeout=600).stdout
    compile_commands = [line for line in rebuilt.splitlines() if " -c " in line]
    compiled = sorted(set(re.findall(r"-c \S*/generated/(\w+)\.cpp", "\n".join(compile_commands))))
    # Erf adds two operators (erf, mul.Scalar): their shards and the table recompile, nothing else.
    new_shards = {f"UnboxingShard_{shard_of(op, 4)}" for op in ("aten::erf", "aten::mul.Scalar")}
    assert compiled == sorted({"KernelTable"} | new_shards), rebuilt[-3000:]
    assert len(compile_commands) == len(compiled)  # no runtime or main.cpp recompiles either
    run = run_predictor(user_build["build"] / "lite_predictor", erf, "--dispatch", "static", "--input",
                        user_build["models"] / "gate.inputs.pt")
    assert run.returncode == 5  # erf takes one input: the build accepted the op, the inputs are wrong
    assert "takes 1 input(s), the file has 2" in run.stderr
