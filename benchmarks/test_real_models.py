"""benchmarks/real_models.py: the real-model set exports as users save it, and the files agree with eager PyTorch.

The exports run in the peers' environment (build/peers_venv, with torchvision and transformers); without it
those tests are skipped. Run by hand (not part of ./build.sh test): .venv/bin/python -m pytest benchmarks/test_real_models.py
"""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from benchmarks.real_models import FROZEN_SUFFIX, MODEL_NAMES, TORCHVISION_IMPORT_SCHEMAS, parse_args

REPO_ROOT = Path(__file__).resolve().parent.parent
PEERS_PYTHON = REPO_ROOT / "build" / "peers_venv" / "bin" / "python"


def _peers_have_exporters() -> bool:
    if not PEERS_PYTHON.exists():
        return False
    found = subprocess.run([str(PEERS_PYTHON), "-c", "import importlib.util as u; "
                            "print(all(u.find_spec(m) for m in ('torchvision', 'transformers', 'onnxruntime')))"],
                           capture_output=True, text=True)
    return found.stdout.strip() == "True"


needs_peers = pytest.mark.skipif(not _peers_have_exporters(),
                                 reason="no peers environment with torchvision and transformers "
                                        "(python -c 'from benchmarks.peers_env import ensure_peers_python as e; e()')")


def _export(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PEERS_PYTHON), "-m", "benchmarks.real_models", "--out", str(out), *args],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)


def _lite_outputs(path: Path) -> list[torch.Tensor]:
    from torch.jit.mobile import _load_for_lite_interpreter

    from scripts.dump_ops import flatten_outputs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = _load_for_lite_interpreter(str(path))
        inputs = torch.load(path.with_name(path.stem + ".inputs.pt"))
        with torch.no_grad():
            return flatten_outputs(module(*inputs))


def test_unknown_model_names_are_refused_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["resnet19"])
    assert "resnet19" in capsys.readouterr().err and "resnet18" in MODEL_NAMES


def test_the_schemas_defined_for_torchvisions_import_are_its_own() -> None:
    from test_models.torchvision_ops import SCHEMAS

    assert TORCHVISION_IMPORT_SCHEMAS["nms"] == SCHEMAS["nms"]


@needs_peers
def test_a_classifier_is_saved_unfrozen_and_frozen_and_both_reproduce_eager(tmp_path: Path) -> None:
    done = _export(tmp_path, "resnet18", "--no-pte")
    assert done.returncode == 0, done.stderr[-2000:]
    for stem in ("resnet18", "resnet18" + FROZEN_SUFFIX):
        expected = torch.load(tmp_path / f"{stem}.expected.pt")
        (got,) = _lite_outputs(tmp_path / f"{stem}.ptl")
        assert got.shape == (1, 1000) and torch.allclose(got, expected[0], atol=1e-5, rtol=1e-5)
    manifest = json.loads((tmp_path / "manifest.json").read_text())["models"]["resnet18"]
    assert manifest["checks"]["onnx"] == "ok" and manifest["files"]["ptl"]["bytes"] > 0


@needs_peers
def test_the_unfrozen_classifier_keeps_batch_norm_and_the_frozen_one_folds_it(tmp_path: Path) -> None:
    from tools.model_ops import ops_of_lite_model_file

    assert _export(tmp_path, "resnet18", "--no-onnx", "--no-pte").returncode == 0
    assert "aten::batch_norm" in ops_of_lite_model_file(tmp_path / "resnet18.ptl")
    assert "aten::batch_norm" not in ops_of_lite_model_file(tmp_path / f"resnet18{FROZEN_SUFFIX}.ptl")


@needs_peers
def test_the_quantized_model_is_quantized_and_ort_has_its_own_int8_model(tmp_path: Path) -> None:
    from tools.model_ops import ops_of_lite_model_file

    done = _export(tmp_path, "mobilenet_v2_int8")  # its .pte is refused at once
    assert done.returncode == 0, done.stderr[-2000:]
    assert "quantized::conv2d_relu.new" in ops_of_lite_model_file(tmp_path / "mobilenet_v2_int8.ptl")
    manifest = json.loads((tmp_path / "manifest.json").read_text())["models"]["mobilenet_v2_int8"]
    assert manifest["checks"]["onnx_float"] == "ok" and "pte" in manifest["skipped"]
    # Two calibrations of the same float network: a few output steps apart, not more.
    assert manifest["notes"]["ort_int8_vs_torch_int8_steps"] < 4
    step = manifest["atol"] - 1e-4
    (got,) = _lite_outputs(tmp_path / "mobilenet_v2_int8.ptl")
    assert (got - torch.load(tmp_path / "mobilenet_v2_int8.expected.pt")[0]).abs().max() <= step * 1.001
