"""Embedding the runtime in an app: `cmake --install` gives a CMake package, and examples/embed, a separate
project built against it (find_package(LightweightDispatch), lightweight_dispatch_add_kernels), runs models
as lite_predictor does, with kernels for exactly its ops yaml. One install and one build per consumer are
shared by the tests of this module."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from predictor_runner import lite_module_ops, run_predictor, save_lite_model
from scripts import dump_ops

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "examples" / "embed"
# cmake and ninja come from the venv's requirements, beside the interpreter running the tests.
TOOL_DIR = Path(sys.executable).parent
CMAKE = str(TOOL_DIR / "cmake") if (TOOL_DIR / "cmake").exists() else "cmake"
NINJA = str(TOOL_DIR / "ninja") if (TOOL_DIR / "ninja").exists() else "ninja"
C10_DTYPE_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.int64: "Long", torch.int32: "Int",
                   torch.bool: "Bool", torch.uint8: "Byte", torch.quint8: "QUInt8"}


@dataclass(frozen=True)
class Consumer:
    build_dir: Path
    ops_yaml: Path

    @property
    def app(self) -> Path:
        return self.build_dir / "embed"

    @property
    def generated(self) -> Path:
        return self.build_dir / "embed_kernels_generated"

    def run(self, model: Path, inputs: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.app), str(model), str(inputs)], capture_output=True, text=True,
                              timeout=300, check=False)


def torch_cmake_prefix() -> str:
    return torch.utils.cmake_prefix_path


def configure(source: Path, build_dir: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CMAKE, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={NINJA}", "-S", str(source), "-B", str(build_dir), *options],
        capture_output=True, text=True, check=False, timeout=300,
    )


def configure_example(build_dir: Path, prefix: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return configure(EXAMPLE, build_dir, f"-DCMAKE_PREFIX_PATH={prefix};{torch_cmake_prefix()}",
                     f"-DPython3_EXECUTABLE={sys.executable}", *options)


def build_consumer(build_dir: Path, prefix: Path, ops_yaml: Path) -> Consumer:
    configured = configure_example(build_dir, prefix, f"-DOPS_YAML={ops_yaml}", "-DKERNEL_SHARDS=2")
    assert configured.returncode == 0, configured.stdout[-3000:] + configured.stderr[-3000:]
    built = subprocess.run([NINJA, "-C", str(build_dir)], capture_output=True, text=True, timeout=1200)
    assert built.returncode == 0, built.stdout[-4000:]
    return Consumer(build_dir, ops_yaml)


def printed_outputs(stdout: str) -> list[str]:
    return re.findall(r"^output \d+: (\[.*\] \w+)$", stdout, flags=re.MULTILINE)


def shape_and_dtype(tensor: torch.Tensor) -> str:
    return f"[{', '.join(map(str, tensor.shape))}] {C10_DTYPE_NAMES[tensor.dtype]}"


def table_operators(generated: Path) -> set[str]:
    return set(re.findall(r'^    \{"([^"]+)",$', (generated / "KernelTable.cpp").read_text(), flags=re.MULTILINE))


@pytest.fixture(scope="module")
def prefix(predictor: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project built in build/, installed into a fresh prefix."""
    prefix = tmp_path_factory.mktemp("embed") / "prefix"
    installed = subprocess.run([CMAKE, "--install", str(predictor.parent), "--prefix", str(prefix)],
                               capture_output=True, text=True, timeout=300, check=False)
    assert installed.returncode == 0, installed.stderr
    if not (prefix / "lib" / "cmake" / "LightweightDispatch" / "LightweightDispatchConfig.cmake").is_file():
        pytest.fail(f"{predictor.parent} installs no package: reconfigure it (./build.sh)")
    return prefix


@pytest.fixture(scope="module")
def detection_app(prefix: Path, tmp_path_factory: pytest.TempPathFactory) -> Consumer:
    """examples/embed for MobileNetV2 and the SSDlite head's operators."""
    root = tmp_path_factory.mktemp("detection_app")
    ops_yaml = root / "ops.yaml"
    assert dump_ops.main(["mobilenet_v2", "ssdlite_head", "--output", str(ops_yaml),
                          "--models-dir", str(root / "models")]) == 0
    return build_consumer(root / "build", prefix, ops_yaml)


@pytest.fixture(scope="module")
def add_loop_app(prefix: Path, tmp_path_factory: pytest.TempPathFactory) -> Consumer:
    """examples/embed for a one-operator model (micro_add_loop: aten::add.Tensor)."""
    root = tmp_path_factory.mktemp("add_loop_app")
    ops_yaml = root / "ops.yaml"
    assert dump_ops.main(["micro_add_loop", "--output", str(ops_yaml), "--models-dir", str(root / "models")]) == 0
    return build_consumer(root / "build", prefix, ops_yaml)


def test_the_package_holds_the_runtime_its_headers_and_the_generator(prefix: Path) -> None:
    for path in ["lib/liblightweight_dispatch_runtime.a", "lib/liblightweight_dispatch_kernel_support.a",
                 "lib/libtorchvision_kernels.a", "include/lightweight_dispatch/runtime.h",
                 "include/lightweight_dispatch/kernel_table.h", "include/lightweight_dispatch/unboxing_helpers.h",
                 "include/lightweight_dispatch/dispatcher_call.h", "include/lightweight_dispatch/torchvision_kernels.h",
                 "share/lightweight_dispatch/tools/gen_unboxing.py",
                 "share/lightweight_dispatch/tools/ops_from_models.py", "share/lightweight_dispatch/custom_ops.yaml",
                 "share/lightweight_dispatch/quantized_ops.yaml", "share/lightweight_dispatch/cmake/codegen.cmake",
                 "lib/cmake/LightweightDispatch/LightweightDispatchConfigVersion.cmake"]:
        assert (prefix / path).is_file(), path


def test_the_runtime_library_references_no_generated_kernel(prefix: Path) -> None:
    # The app's kernel library is chosen in the app's code (KernelLibrary::linked()), never by the runtime.
    symbols = subprocess.run(["nm", "-C", "--undefined-only", str(prefix / "lib" / "liblightweight_dispatch_runtime.a")],
                             capture_output=True, text=True, check=True).stdout
    assert not re.findall(r"lightweight_dispatch::(generated_kernels|register_custom_ops_with_dispatcher)\(\)", symbols)


@pytest.mark.parametrize("model", ["mobilenet_v2", "ssdlite_head"])
def test_the_app_prints_the_shapes_lite_predictor_outputs(
    model: str, detection_app: Consumer, predictor: Path, models_dir: Path, tmp_path: Path
) -> None:
    run = detection_app.run(models_dir / f"{model}.ptl", models_dir / f"{model}.inputs.pt")
    assert run.returncode == 0, run.stderr
    saved = tmp_path / "outputs.pt"
    reference = run_predictor(predictor, models_dir / f"{model}.ptl", "--save-outputs", saved, "--json")
    assert reference.returncode == 0, reference.stderr
    expected = [shape_and_dtype(t) for t in dump_ops.flatten_outputs(torch.load(saved))]
    assert printed_outputs(run.stdout) == expected
    assert re.search(r"^load [0-9.e+-]+ ms, forward [0-9.e+-]+ ms$", run.stdout, flags=re.MULTILINE)


def test_the_app_prints_the_error_and_exits_non_zero(detection_app: Consumer, tmp_path: Path) -> None:
    run = detection_app.run(tmp_path / "absent.ptl", tmp_path / "absent.inputs.pt")
    assert run.returncode == 1
    assert run.stderr == f"embed: {tmp_path / 'absent.ptl'}: no such model file\n"


def test_another_ops_yaml_gives_a_library_of_exactly_its_kernels(add_loop_app: Consumer) -> None:
    # The yaml's one operator, plus the in-place overload the bind-time stage calls for it, listed as such.
    assert table_operators(add_loop_app.generated) == {"aten::add.Tensor", "aten::add_.Tensor"}
    report = json.loads((add_loop_app.generated / "codegen_report.json").read_text())
    assert (report["selected"], report["generated"], report["custom_generated"]) == (1, 2, [])
    assert report["stage_companions"] == [{"name": "aten::add_.Tensor", "serves": "aten::add.Tensor"}]
    assert report["backends"] == ["CPU", "QuantizedCPU"]


def test_the_detection_library_carries_its_yamls_operators(detection_app: Consumer) -> None:
    report = json.loads((detection_app.generated / "codegen_report.json").read_text())
    kernels = table_operators(detection_app.generated)
    assert len(kernels) == report["generated"] + len(report["custom_generated"]) + len(report["quantized_generated"])
    assert {"aten::conv2d", "aten::hardtanh_", "torchvision::nms"} <= kernels


def test_a_model_outside_the_yaml_fails_naming_every_missing_operator(
    add_loop_app: Consumer, predictor: Path, models_dir: Path
) -> None:
    static_ops = {op["name"] for op in run_predictor(predictor, models_dir / "mobilenet_v2.ptl", "--iters", "1",
                                                     "--json").json()["ops"] if op["path"] == "static"}
    missing = sorted(static_ops - {"aten::add.Tensor"})
    run = add_loop_app.run(models_dir / "mobilenet_v2.ptl", models_dir / "mobilenet_v2.inputs.pt")
    assert run.returncode == 1
    assert f"has no generated kernel for {len(missing)} operator(s) the model calls:" in run.stderr
    assert re.findall(r"^  (\S+)$", run.stderr, flags=re.MULTILINE) == missing
    assert run.stdout == ""


def test_the_example_needs_an_ops_yaml(prefix: Path, tmp_path: Path) -> None:
    result = configure_example(tmp_path / "b", prefix)
    assert result.returncode != 0
    assert "OPS_YAML is not set: configure with -DOPS_YAML=/path/to/ops.yaml" in " ".join(result.stderr.split())


def test_the_package_refuses_a_python_without_torch(prefix: Path, tmp_path: Path) -> None:
    # The venv's interpreter without site-packages: a Python that cannot import torch or yaml.
    bare_python = tmp_path / "bare_python"
    bare_python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare_python.chmod(0o755)
    result = configure(EXAMPLE, tmp_path / "b", f"-DCMAKE_PREFIX_PATH={prefix};{torch_cmake_prefix()}",
                       f"-DPython3_EXECUTABLE={bare_python}", f"-DOPS_YAML={tmp_path / 'ops.yaml'}")
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert f"{bare_python} cannot run the kernel generator (ModuleNotFoundError: No module named 'torch')" in message
    assert "-DPython3_EXECUTABLE=/path/to/venv/bin/python" in message


def test_a_consumer_chooses_its_backends(prefix: Path, tmp_path: Path) -> None:
    ops_yaml = tmp_path / "ops.yaml"
    ops_yaml.write_text("- aten::add.Tensor\n")
    refused = configure_example(tmp_path / "cuda", prefix, f"-DOPS_YAML={ops_yaml}", "-DSTATIC_DISPATCH_BACKEND=CUDA")
    assert refused.returncode != 0
    assert "STATIC_DISPATCH_BACKEND='CUDA': 'CUDA' is not supported" in refused.stderr
    build_dir = tmp_path / "cpu"
    assert configure_example(build_dir, prefix, f"-DOPS_YAML={ops_yaml}", "-DSTATIC_DISPATCH_BACKEND=CPU").returncode == 0
    # Generating is enough to see the backends: nothing is compiled.
    subprocess.run([NINJA, "-C", str(build_dir), "embed_kernels_codegen"], check=True, capture_output=True, timeout=300)
    report = json.loads((build_dir / "embed_kernels_generated" / "codegen_report.json").read_text())
    assert report["backends"] == ["CPU"]


class Relu(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


class Sigmoid(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * 2.0


def test_a_consumer_selects_its_kernels_from_its_models(prefix: Path, tmp_path: Path) -> None:
    project = tmp_path / "app"
    (project / "more_models").mkdir(parents=True)
    relu = save_lite_model(Relu(), project / "relu.ptl")
    sigmoid = save_lite_model(Sigmoid(), project / "more_models" / "sigmoid.ptl")
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\n"
        "project(app LANGUAGES CXX)\n"
        "find_package(LightweightDispatch CONFIG REQUIRED)\n"
        "lightweight_dispatch_add_kernels(app_kernels MODELS relu.ptl more_models/ NUM_SHARDS 1)\n"
    )
    build_dir = tmp_path / "build"
    configured = configure(project, build_dir, f"-DCMAKE_PREFIX_PATH={prefix};{torch_cmake_prefix()}",
                           f"-DPython3_EXECUTABLE={sys.executable}")
    assert configured.returncode == 0, configured.stderr[-3000:]
    # The package's tool dumps the models' operators; the library of their kernels compiles.
    built = subprocess.run([NINJA, "-C", str(build_dir), "app_kernels"], capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-4000:]
    commands = subprocess.run([NINJA, "-C", str(build_dir), "-t", "commands", "app_kernels"], capture_output=True,
                              text=True, check=True).stdout
    share = prefix / "share" / "lightweight_dispatch"
    assert f"cd {share} && {sys.executable} -m tools.ops_from_models --model-file {relu} --model-file {sigmoid}" in commands
    union = lite_module_ops(relu) | lite_module_ops(sigmoid)
    assert table_operators(build_dir / "app_kernels_generated") == union
    assert (build_dir / "libapp_kernels.a").stat().st_size > 0


def test_add_subdirectory_of_the_source_tree_gives_the_same_function_and_target(tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    (project / "ops.yaml").write_text("- aten::add.Tensor\n")
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\n"
        "project(app LANGUAGES CXX)\n"
        f'add_subdirectory("{REPO_ROOT}" lightweight_dispatch EXCLUDE_FROM_ALL)\n'
        "lightweight_dispatch_add_kernels(app_kernels OPS_YAML ops.yaml NUM_SHARDS 1)\n"
        f'add_executable(app "{EXAMPLE / "main.cpp"}")\n'
        "target_link_libraries(app PRIVATE lightweight_dispatch::runtime app_kernels)\n"
    )
    build_dir = tmp_path / "build"
    configured = configure(project, build_dir, f"-DPython3_EXECUTABLE={sys.executable}")
    assert configured.returncode == 0, configured.stderr[-3000:]
    # Compiling the runtime again would prove nothing the installed package does not: generate, and check
    # what linking the app would take.
    subprocess.run([NINJA, "-C", str(build_dir), "app_kernels_codegen"], check=True, capture_output=True, timeout=300)
    assert table_operators(build_dir / "app_kernels_generated") == {"aten::add.Tensor", "aten::add_.Tensor"}
    link = subprocess.run([NINJA, "-C", str(build_dir), "-t", "commands", "app"], capture_output=True, text=True,
                          check=True).stdout.splitlines()[-1]
    for library in ["lightweight_dispatch/runtime/liblightweight_dispatch_runtime.a", "libapp_kernels.a",
                    "lightweight_dispatch/kernel_support/liblightweight_dispatch_kernel_support.a",
                    "lightweight_dispatch/custom_kernels/libtorchvision_kernels.a"]:
        assert library in link


def installed_headers(prefix: Path) -> list[Path]:
    return sorted((prefix / "include").rglob("*.h"))


def test_the_package_installs_public_headers_only(prefix: Path) -> None:
    # Every installed header is one of include/lightweight_dispatch/, and every one of those is installed.
    public = sorted(p.relative_to(REPO_ROOT / "include") for p in (REPO_ROOT / "include").rglob("*.h"))
    assert [p.relative_to(prefix / "include") for p in installed_headers(prefix)] == public


@pytest.mark.parametrize("header", sorted(p.name for p in (REPO_ROOT / "include" / "lightweight_dispatch").glob("*.h")))
def test_each_installed_header_compiles_alone(prefix: Path, header: str, tmp_path: Path) -> None:
    # With only the installed include tree and LibTorch's headers on the path: nothing public includes an internal
    # header of the source tree.
    unit = tmp_path / "unit.cpp"
    unit.write_text(f"#include <lightweight_dispatch/{header}>\n")
    torch_include = Path(torch.__file__).parent / "include"
    compiled = subprocess.run(
        ["c++", "-std=c++17", "-fsyntax-only", f"-I{prefix / 'include'}", "-isystem", str(torch_include),
         "-isystem", str(torch_include / "torch" / "csrc" / "api" / "include"), str(unit)],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
