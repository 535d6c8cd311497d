"""The CMake front door: backend validation, SELECTED_MODELS that cannot be used, and the stock-interpreter
build (USE_LIGHTWEIGHT_DISPATCH=OFF)."""
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


def test_a_missing_selected_model_fails_configure_naming_it(tmp_path: Path) -> None:
    absent = tmp_path / "absent.ptl"
    result = configure(tmp_path / "b", f"-DSELECTED_MODELS={absent}")
    assert result.returncode != 0
    assert f"generated_kernels: MODELS '{absent}': no such file or directory" in " ".join(result.stderr.split())


def test_a_selected_directory_without_models_fails_configure_naming_it(tmp_path: Path) -> None:
    (tmp_path / "empty_dir").mkdir()
    result = configure(tmp_path / "b", f"-DSELECTED_MODELS={tmp_path / 'empty_dir'}/")
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert f"generated_kernels: MODELS '{tmp_path / 'empty_dir'}': a directory with no .ptl files" in message


def test_a_damaged_selected_model_fails_the_build_naming_it(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.ptl"
    damaged.write_text("not a model")
    build_dir = tmp_path / "b"
    configured = configure(build_dir, f"-DSELECTED_MODELS={damaged}")
    assert configured.returncode == 0, configured.stderr[-3000:]
    # Selecting is the first step of the kernels: nothing needs compiling to see it fail.
    built = subprocess.run([NINJA, "-C", str(build_dir), "generated_kernels_codegen"], capture_output=True, text=True,
                           timeout=300)
    assert built.returncode != 0
    assert f"ops_from_models: error: {damaged}: not a lite-interpreter model (not a zip archive)" in built.stdout
    assert not (build_dir / "generated_kernels_selected_ops.yaml").exists()
    assert "Generating statically dispatched kernels" not in built.stdout


def test_configured_build_is_up_to_date_after_building() -> None:
    # An unchanged op set must recompile nothing: ninja has no work after ./build.sh.
    build_dir = REPO_ROOT / "build"
    if not (build_dir / "build.ninja").is_file():
        pytest.fail("build/ is not configured: run ./build.sh")
    subprocess.run([CMAKE, "--build", str(build_dir)], check=True, capture_output=True, timeout=600)
    dry_run = subprocess.run([NINJA, "-C", str(build_dir), "-n"], capture_output=True, text=True, check=True)
    assert "no work to do" in dry_run.stdout


def test_stock_build_compiles_no_generated_kernel(tmp_path: Path) -> None:
    build_dir = tmp_path / "stock"
    configured = configure(build_dir, "-DUSE_LIGHTWEIGHT_DISPATCH=OFF")
    assert configured.returncode == 0, configured.stderr
    assert not (build_dir / "generated").exists()
    # What building lite_predictor would run: the main build's lite_predictor_stock links the same objects.
    commands = subprocess.run([NINJA, "-C", str(build_dir), "-t", "commands", "lite_predictor"],
                              capture_output=True, text=True, check=True).stdout
    assert "runtime/no_generated_kernels.cpp" in commands
    assert "Unboxing" not in commands and "codegen" not in commands
    targets = subprocess.run([NINJA, "-C", str(build_dir), "-t", "targets", "all"],
                             capture_output=True, text=True, check=True).stdout
    assert "lite_predictor_stock" not in targets  # an OFF build's lite_predictor is the stock one


def test_stock_predictor_has_no_static_mode_and_runs_dynamically(models_dir: Path) -> None:
    predictor = models_dir.parent / "lite_predictor_stock"
    assert predictor.is_file(), f"{predictor} is missing: cmake --build build"
    refused = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--dispatch", "static")
    assert refused.returncode == 2
    assert "USE_LIGHTWEIGHT_DISPATCH=OFF" in refused.stderr
    run = run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--iters", "1", "--json")
    assert run.returncode == 0, run.stderr
    report = run.json()
    assert report["dispatch"] == "dynamic" and report["outputs_match"] is True
    assert {op["path"] for op in report["ops"]} == {"dispatcher", "jit"}


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
