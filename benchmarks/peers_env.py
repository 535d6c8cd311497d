"""The benchmark's own environment for peer runtimes (ONNX Runtime, ExecuTorch), apart from the project's .venv.

build/peers_venv is a venv whose only packages are benchmarks/peers-requirements.txt, installed without their
dependencies (the file pins the whole environment: ExecuTorch's wheel asks for much it does not need here); a
.pth file puts the project venv's site-packages after its own, so the same torch 2.13.0 exports the models
without a second copy, and nothing the peers install is visible to ./build.sh or ./build.sh test.
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO_ROOT / "benchmarks" / "peers-requirements.txt"


class PeersEnvError(Exception):
    """The peers' environment could not be made, with the reason (the benchmark then skips the peers)."""


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise PeersEnvError(f"{' '.join(command[:4])} ...: {(done.stderr or done.stdout).strip()[-800:]}")


def ensure_peers_python(venv: Path = REPO_ROOT / "build" / "peers_venv") -> Path:
    """The peers environment's python, created (and its requirements installed) when missing or stale."""
    python = venv / "bin" / "python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)])
    site_packages = Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    (site_packages / "lightweight_dispatch_project_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    stamp = venv / ".peers-requirements.sha256"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if not stamp.exists() or stamp.read_text().strip() != wanted:
        _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
              "-r", str(REQUIREMENTS)])
        stamp.write_text(wanted + "\n")
    _check_same_torch(python)
    return python


def _check_same_torch(python: Path) -> None:
    """The peers must export with the project's torch, not one of their own shadowing it."""
    import torch

    theirs = subprocess.run([str(python), "-c", "import torch; print(torch.__file__)"], capture_output=True, text=True)
    if theirs.returncode != 0 or Path(theirs.stdout.strip()) != Path(torch.__file__):
        raise PeersEnvError(f"{python} imports torch from {theirs.stdout.strip() or theirs.stderr.strip()[-300:]!r}, "
                            f"not the project's {torch.__file__}: remove {python.parent.parent} to make it anew")
