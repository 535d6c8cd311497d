"""The cross build's front door, without the cross tools (./build.sh test-cross, run by CI after the tests, is
the build itself under emulation): a missing cross compiler or qemu is a message naming the package, a folder
that is not a LibTorch and a LibTorch of another torch release are refused at configure, and the pieces of
scripts/test_cross.py that decide a verdict."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from scripts import test_cross  # noqa: E402
from scripts.fetch_target_torch import target_torch_version  # noqa: E402
from test_cmake_configure import configure  # noqa: E402


def build_sh_without_tools(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    """./build.sh COMMAND with a PATH that has nothing but dirname (build.sh's first need)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dirname").symlink_to(shutil.which("dirname"))
    env = {**os.environ, "PATH": str(bin_dir)}
    env.pop("CROSS_TOOLCHAIN_FILE", None)
    return subprocess.run(["/bin/bash", str(REPO_ROOT / "build.sh"), command], capture_output=True, text=True,
                          env=env, timeout=60, check=False)


def test_cross_without_the_cross_compiler_names_its_package(tmp_path: Path) -> None:
    run = build_sh_without_tools(tmp_path, "cross")
    assert run.returncode == 2
    assert "aarch64-linux-gnu-g++ is missing: install it with 'apt-get install g++-aarch64-linux-gnu'" in run.stderr
    assert "CROSS_TOOLCHAIN_FILE" in run.stderr


def test_test_cross_without_qemu_names_its_package(tmp_path: Path) -> None:
    run = build_sh_without_tools(tmp_path, "test-cross")
    assert run.returncode == 2
    assert "qemu-aarch64 is missing: install it with 'apt-get install qemu-user'" in run.stderr


def test_a_target_torch_that_is_not_a_libtorch_is_refused(tmp_path: Path) -> None:
    (tmp_path / "not_torch").mkdir()
    run = configure(tmp_path / "b", f"-DLIGHTWEIGHT_DISPATCH_TARGET_TORCH={tmp_path / 'not_torch'}")
    assert run.returncode != 0
    message = " ".join(run.stderr.split())
    assert f"LIGHTWEIGHT_DISPATCH_TARGET_TORCH={tmp_path / 'not_torch'} is not a LibTorch" in message


def test_a_target_torch_of_another_release_is_refused(tmp_path: Path) -> None:
    # This host's LibTorch, its CMake package copied and claiming another version: the generator's
    # native_functions.yaml would not match its kernels.
    host = Path(torch.__file__).parent
    fake = tmp_path / "torch"
    fake.mkdir()
    for part in ("lib", "include"):
        (fake / part).symlink_to(host / part)
    shutil.copytree(host / "share", fake / "share")
    version_file = fake / "share" / "cmake" / "Torch" / "TorchConfigVersion.cmake"
    version = torch.__version__.split("+")[0]
    version_file.write_text(version_file.read_text().replace(f'"{version}', '"2.12.0'))
    run = configure(tmp_path / "b", f"-DLIGHTWEIGHT_DISPATCH_TARGET_TORCH={fake}")
    assert run.returncode != 0
    message = " ".join(run.stderr.split())
    assert "is torch 2.12.0, but the generator reads native_functions.yaml from the host's torch" in message


def test_the_wheels_version_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "version.py").write_text("__version__ = '2.13.0+cu130'\ngit_version = 'abc'\n")
    assert target_torch_version(tmp_path) == "2.13.0+cu130"


def test_only_unlisted_dispatcher_calls_fail_a_cross_run() -> None:
    report = {"ops": [{"name": "aten::add.Tensor", "path": "static"}, {"name": "aten::size", "path": "jit"},
                      {"name": "quantized::linear", "path": "dispatcher"}, {"name": "aten::erf", "path": "dispatcher"}]}
    assert test_cross.off_the_static_path(report, {"quantized::linear"}) == ["aten::erf"]


def test_the_emulation_root_has_the_aarch64_libraries_and_an_arm_cpu(tmp_path: Path) -> None:
    root = test_cross.qemu_root(tmp_path)
    assert (root / "lib").resolve() == (test_cross.CROSS_SYSROOT / "lib").resolve()
    cpuinfo = (root / "proc" / "cpuinfo").read_text()
    assert "CPU implementer\t: 0x41" in cpuinfo and "asimd" in cpuinfo
    assert test_cross.qemu_command(root, Path("lp"), "m.ptl") == ["qemu-aarch64", "-L", str(root), "lp", "m.ptl"]
