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


# ------------------------------------------------------------------ the benchmark's section (no timing: fake results)

def _fake_samples(times: dict[str, list[float]]) -> "Samples":
    from benchmarks.latency import Samples

    rounds = [dict(zip(times, values)) for values in zip(*times.values())]
    return Samples(load_ms={m: 1.0 for m in times}, first_ms={m: 2.0 for m in times}, rounds=rounds)


def test_the_real_model_section_judges_ours_against_the_faster_peer_and_reports_it() -> None:
    from benchmarks import real_models_bench as real
    from benchmarks.figures import Section
    from benchmarks.report import real_models_cold_table, real_models_lines

    section = Section()
    # ExecuTorch is the faster peer; unfrozen is 2% slower than frozen; the stage helps unfrozen, not frozen.
    samples = _fake_samples({"static": [9.0, 9.2, 9.1], "static_plain": [10.0, 10.0, 10.0],
                             "static_frozen": [9.0 / 1.02, 9.2 / 1.02, 9.1 / 1.02],
                             "static_plain_frozen": [8.0, 8.0, 8.0],
                             "onnxruntime": [12.0, 12.0, 12.0], "executorch": [10.0, 10.0, 10.0]})
    samples.compiled_sites = {"static": (21, 21), "static_frozen": (17, 21)}
    real.record_steady("resnet18", 1, samples, 3, section)
    p = "real_models/resnet18/threads_1"
    assert section.get(f"{p}/best_peer") == "executorch"
    assert section.get(f"{p}/static_to_best_peer") == 0.91
    assert section.get(f"{p}/static_to_static_frozen") == 1.02
    assert section.get(f"{p}/static_to_static_plain") == 0.91
    assert section.get(f"{p}/static_frozen_to_static_plain_frozen") > 1.0
    # Cold start: ORT is the faster peer to start; ours 1.4x it unfrozen, 1.6x frozen.
    cold = {"static": [(10.0, 4.0, 0.0)] * 3, "static_frozen": [(12.0, 4.0, 0.0)] * 3,
            "onnxruntime": [(8.0, 2.0, 0.0)] * 3, "executorch": [(9.0, 3.0, 0.0)] * 3}
    real.record_cold("resnet18", cold, {}, section)
    assert section.get("real_models/resnet18/cold/best_peer") == "onnxruntime"
    assert section.get("real_models/resnet18/cold/static_to_best_peer_load_plus_first") == 1.4
    real.judge("resnet18", (1,), section)
    verdicts = {t.name.split(": ", 1)[1].split(" <=")[0]: t.met for t in section.targets}
    assert verdicts == {"ours": True, "unfrozen": True, "the bind-time stage": False, "load + first run": False}

    # A model with no ExecuTorch file: ORT is the best peer; no 2-thread run, so those parts are not judged.
    int8 = _fake_samples({"static": [5.0, 5.0, 5.0], "static_plain": [5.0, 5.0, 5.0], "static_frozen": [5.0, 5.0, 5.0],
                          "static_plain_frozen": [5.0, 5.0, 5.0], "onnxruntime": [4.0, 4.0, 4.0]})
    int8.failed["executorch"] = "not exported: eager-mode quantized modules are not exportable"
    int8.compiled_sites = {"static": (0, 0), "static_frozen": (0, 0)}  # the stage leaves quantized convs alone
    real.record_steady("mobilenet_v2_int8", 1, int8, 3, section)
    assert section.get("real_models/mobilenet_v2_int8/threads_1/best_peer") == "onnxruntime"
    real.judge("mobilenet_v2_int8", (1, 2), section)
    peer_target = next(t for t in section.targets if t.name.startswith("real mobilenet_v2_int8: ours"))
    assert peer_target.met is False and "frozen 2t not measured" in peer_target.detail
    stage_target = next(t for t in section.targets if t.name.startswith("real mobilenet_v2_int8: the bind-time"))
    assert stage_target.met is None  # 1 thread met, 2 threads not measured
    assert any("mobilenet_v2_int8 1 thread(s) executorch: not exported" in s for s in section.skipped)

    markdown = "\n".join(real_models_lines(section))
    row = next(line for line in markdown.splitlines() if line.startswith("| `resnet18` | 1 |"))
    assert "| ExecuTorch |" in row and "0.910 ✓" in row and "1.020 ✓" in row and "✗" in row
    assert row.endswith("| 21 / 21; 17 / 21 |"), row
    int8_row = next(line for line in markdown.splitlines() if line.startswith("| `mobilenet_v2_int8` | 1 |"))
    assert "| ONNX Runtime |" in int8_row and "1.250 ✗" in int8_row
    assert int8_row.endswith("| no site; no site |"), int8_row
    cold_row = next(line for line in real_models_cold_table(section) if line.startswith("| `resnet18`"))
    assert "14.0 (10.0 + 4.0)" in cold_row and "1.40 ✓" in cold_row and "1.60 ✗" in cold_row


def test_the_section_knows_the_set_and_reuses_exports_only_while_their_inputs_are_unchanged(tmp_path: Path) -> None:
    from benchmarks import real_models_bench as real

    assert real.MODEL_NAMES == MODEL_NAMES and real.FROZEN_SUFFIX == FROZEN_SUFFIX
    assert not real.exports_current(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"models": {name: {} for name in MODEL_NAMES}}))
    for name in MODEL_NAMES:
        (tmp_path / f"{name}.ptl").write_bytes(b"")
    (tmp_path / real.STAMP).write_text("stale\n")
    assert not real.exports_current(tmp_path)
    (tmp_path / real.STAMP).write_text(real.export_key() + "\n")
    assert real.exports_current(tmp_path)


def test_a_prebuilt_peer_file_is_checked_against_the_reference_its_manifest_names(tmp_path: Path) -> None:
    from benchmarks.eager_exports import prebuilt_export

    torch.save([torch.zeros(3)], tmp_path / "m.inputs.pt")
    torch.save([torch.zeros(2)], tmp_path / "m.expected.pt")
    torch.save([torch.ones(2)], tmp_path / "m.float.expected.pt")
    manifest = {"models": {"m": {"atol": 0.01, "peer_checks": {"onnx": {"expected": "m.float.expected.pt", "atol": 0.5}}}}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    onnx, pte = prebuilt_export(tmp_path / "m.onnx", tmp_path / "m.inputs.pt"), prebuilt_export(
        tmp_path / "m.pte", tmp_path / "m.inputs.pt")
    assert len(onnx.inputs) == 1
    assert onnx.check([torch.full((2,), 0.6)]) is None and onnx.check([torch.zeros(2)]) is not None
    assert pte.check([torch.full((2,), 0.005)]) is None and pte.check([torch.full((2,), 0.6)]) is not None


def test_the_int8_model_is_also_judged_with_the_engines_chosen_per_call() -> None:
    from benchmarks import real_models_bench as real
    from benchmarks.figures import Section
    from benchmarks.report import auto_engines_lines

    assert "mobilenet_v2_int8" in real.INT8_MODELS
    section = Section()
    int8 = _fake_samples({"static": [5.0, 5.0, 5.0], "static_plain": [5.0, 5.0, 5.0], "static_frozen": [5.0, 5.0, 5.0],
                          "static_plain_frozen": [5.0, 5.0, 5.0], "static_auto": [4.2, 4.2, 4.2],
                          "onnxruntime": [4.0, 4.0, 4.0]})
    int8.compiled_sites = {"static": (0, 0), "static_frozen": (0, 0), "static_auto": (38, 53)}
    real.record_steady("mobilenet_v2_int8", 1, int8, 3, section)
    p = "real_models/mobilenet_v2_int8/threads_1"
    assert section.get(f"{p}/static_auto_to_best_peer") == 1.05
    assert section.get(f"{p}/static_auto_to_static") == 0.84
    real.judge("mobilenet_v2_int8", (1,), section)
    auto = next(t for t in section.targets if "--qengine auto" in t.name)
    assert auto.met is False and "1t 1.05" in auto.detail
    lines = "\n".join(auto_engines_lines(section))
    assert "1.050 ✗" in lines and "0.840 of the loaded engine's" in lines and "38 of 53" in lines
    # Its cold start passes the tolerance the mode needs: two of the model's own steps.
    command = real.cold_command(Path("lp"), Path("py"), Path("m"), "mobilenet_v2_int8", "static_auto",
                                {"models": {"mobilenet_v2_int8": {"atol": 0.002}}})
    assert command[command.index("--qengine") + 1] == "auto" and command[command.index("--atol") + 1] == "0.004"
