"""Fetch, once, the LibTorch that an aarch64 Linux build of lite_predictor links: PyTorch's aarch64 wheel of the
host's torch version and the two NVIDIA runtime wheels its libtorch_cpu.so names, unpacked into a cache folder.

    python scripts/fetch_target_torch.py [--cache DIR]     # prints the LibTorch folder (DIR/site/torch)

The aarch64 wheel on the package index is the CUDA flavour (there is no CPU-only one); its libtorch_cpu.so
needs libcudart.so.13 and libcupti.so.13 only to be loadable (nothing CUDA is called without a GPU). They come
from nvidia-cuda-runtime and nvidia-cuda-cupti and are unpacked to DIR/site/nvidia/cu13/lib, beside
DIR/site/torch/lib, where the wheel's own RPATH looks. Nothing in a wheel is changed. The download (about
440 MB) happens once: a second call finds DIR/site/.complete and only checks it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# pip lists the NVIDIA wheels for aarch64 only when given all three platform tags.
PLATFORMS = ("manylinux_2_28_aarch64", "manylinux_2_25_aarch64", "manylinux2014_aarch64")
# The CUDA runtime libraries torch 2.13.0's aarch64 libtorch_cpu.so names (DT_NEEDED), by wheel.
NVIDIA_WHEELS = {"nvidia-cuda-runtime": "13.0.96", "nvidia-cuda-cupti": "13.0.85"}
NVIDIA_LIBRARIES = ("libcudart.so.13", "libcupti.so.13")
# What a C++ build and its runs need from the torch wheel (its Python half is left in the wheel).
TORCH_PARTS = ("torch/lib/", "torch/include/", "torch/share/", "torch/version.py")


class FetchError(RuntimeError):
    pass


def default_cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "lightweight_dispatch"


def host_torch_version() -> str:
    """The host's torch version without its local part ("2.13.0" for "2.13.0+cpu"): the generator reads this
    torch's native_functions.yaml, so the target's LibTorch must be the same release."""
    import torch

    return torch.__version__.split("+")[0]


def download(names: dict[str, str], wheels: Path) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}", "--dest", str(wheels)]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += [f"{name}=={version}" for name, version in names.items()]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise FetchError(f"pip could not download {', '.join(names)} for aarch64: {lines[-1] if lines else done.returncode}")


def wheel_for(wheels: Path, distribution: str, version: str) -> Path:
    prefix = distribution.replace("-", "_") + "-" + version
    found = sorted(wheels.glob(f"{prefix}*-manylinux*aarch64*.whl"))
    if not found:
        raise FetchError(f"no aarch64 wheel of {distribution} {version} in {wheels}")
    return found[0]


def unpack(wheel: Path, site: Path, keep) -> int:
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if keep(member.filename):
                target = archive.extract(member, site)
                mode = (member.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(target, mode)
                count += 1
    return count


def target_torch_version(torch_dir: Path) -> str:
    namespace: dict[str, object] = {}
    exec((torch_dir / "version.py").read_text(), namespace)  # the wheel's own version file: two assignments
    return str(namespace["__version__"])


def fetch(cache: Path) -> Path:
    version = host_torch_version()
    root = cache / f"torch-{version}-aarch64"
    site, wheels = root / "site", root / "wheels"
    stamp = site / ".complete"
    if stamp.is_file() and json.loads(stamp.read_text()).get("torch") == version:
        return site / "torch"
    wheels.mkdir(parents=True, exist_ok=True)
    print(f"fetching torch {version} for aarch64 Linux and its CUDA runtime libraries (~440 MB, once) into {root}",
          file=sys.stderr)
    download({"torch": version, **NVIDIA_WHEELS}, wheels)
    if site.exists():
        shutil.rmtree(site)  # a half-unpacked folder from an interrupted run
    unpacking = root / "site.partial"
    if unpacking.exists():
        shutil.rmtree(unpacking)
    unpack(wheel_for(wheels, "torch", version), unpacking, lambda name: name.startswith(TORCH_PARTS))
    for distribution, nvidia_version in NVIDIA_WHEELS.items():
        unpack(wheel_for(wheels, distribution, nvidia_version), unpacking,
               lambda name: name.startswith("nvidia/") and name.rsplit("/", 1)[-1] in NVIDIA_LIBRARIES)
    got = target_torch_version(unpacking / "torch").split("+")[0]
    if got != version:
        raise FetchError(f"the aarch64 wheel is torch {got}, the host's torch (the generator's) is {version}")
    unpacking.rename(site)
    stamp.write_text(json.dumps({"torch": version, "wheels": sorted(p.name for p in wheels.glob("*.whl"))}))
    return site / "torch"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=default_cache(),
                        help="where the wheels and the unpacked LibTorch go (default: %(default)s)")
    args = parser.parse_args()
    try:
        print(fetch(args.cache))
    except FetchError as error:
        print(f"fetch_target_torch: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
