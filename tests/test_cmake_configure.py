"""The CMake front door: backend validation, and the stock-interpreter build (USE_LIGHTWEIGHT_DISPATCH=OFF)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from predictor_runner import run_predictor

REPO_ROOT = Path(__file__).resolve().parent.parent
# cmake and ninja come from the venv's requirements, beside the interpreter running the tests.
TOOL_DIR = Path(sys.executable).parent
CMAKE = str(TOOL_DIR / "cmake") if (TOOL_DIR / "cmake").exists() else "cmake"
NINJA = str(TOOL_DIR / "ninja") if (TOOL_DIR / "ninja").exists() else "ninja"


def configure(build_dir: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CMAKE, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={NINJA}", "-S", str(REPO_ROOT), "-B", str(build_dir), f"-DPython3_EXECUTABLE={sys.executable}",
         *options],
        capture_output=True, text=True, check=False, timeout=300,
    )


def test_wrong_static_dispatch_backend_fails_configure(tmp_path: Path) -> None:
    result = configure(tmp_path / "b", "-DSTATIC_DISPATCH_BACKEND=CUDA")
    assert result.returncode != 0
    assert "STATIC_DISPATCH_BACKEND='CUDA': 'CUDA' is not supported" in result.stderr
    assert "-DSTATIC_DISPATCH_BACKEND='CPU;QuantizedCPU'" in " ".join(result.stderr.split())


def test_static_dispatch_backends_must_include_cpu(tmp_path: Path) -> None:
    result = configure(tmp_path / "b", "-DSTATIC_DISPATCH_BACKEND=QuantizedCPU")
    assert result.returncode != 0
    assert "STATIC_DISPATCH_BACKEND='QuantizedCPU' must include CPU" in " ".join(result.stderr.split())


def test_configured_build_is_up_to_date_after_building() -> None:
    # An unchanged op set must recompile nothing: ninja has no work after ./build.sh.
    build_dir = REPO_ROOT / "build"
    if not (build_dir / "build.ninja").is_file():
        pytest.fail("build/ is not configured: run ./build.sh")
    subprocess.run([CMAKE, "--build", str(build_dir)], check=True, capture_output=True, timeout=600)
    dry_run = subprocess.run([NINJA, "-C", str(build_dir), "-n"], capture_output=True, text=True, check=True)
    assert "no work to do" in dry_run.stdout


def test_stock_build_has_no_static_mode_and_runs_dynamically(tmp_path: Path, models_dir: Path) -> None:
    build_dir = tmp_path / "stock"
    assert configure(build_dir, "-DUSE_LIGHTWEIGHT_DISPATCH=OFF").returncode == 0
    subprocess.run([CMAKE, "--build", str(build_dir), "--target", "lite_predictor"], check=True,
                   capture_output=True, timeout=900)
    assert not (build_dir / "generated").exists()
    predictor = build_dir / "lite_predictor"
    refused = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--dispatch", "static")
    assert refused.returncode == 2
    assert "USE_LIGHTWEIGHT_DISPATCH=OFF" in refused.stderr
    run = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--iters", "1", "--json")
    assert run.returncode == 0, run.stderr
    report = run.json()
    assert report["dispatch"] == "dynamic" and report["outputs_match"] is True


def test_a_shard_of_the_all_ops_kernels_compiles(tmp_path: Path) -> None:
    # The whole all-ops build takes minutes (./build.sh all-ops); CI compiles one shard and the table.
    build_dir = tmp_path / "all_ops"
    result = configure(build_dir, "-DBUILD_ALL_OPS_KERNELS=ON", "-DALL_OPS_NUM_SHARDS=16")
    assert result.returncode == 0, result.stderr
    objects = [f"CMakeFiles/all_ops_kernels.dir/generated_all_ops/{name}.cpp.o"
               for name in ("UnboxingShard_5", "KernelTable")]
    built = subprocess.run([NINJA, "-C", str(build_dir), *objects], capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-4000:]
    for obj in objects:
        assert (build_dir / obj).stat().st_size > 0
