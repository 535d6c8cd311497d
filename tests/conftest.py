"""Shared fixtures: where the repository, the build and the exported models are."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# LD_TEST_BUILD_DIR runs the tests against another build directory (its lite_predictor and models/).
BUILD_DIR = Path(os.environ.get("LD_TEST_BUILD_DIR", REPO_ROOT / "build")).resolve()
MODELS_DIR = BUILD_DIR / "models"
PREDICTOR = BUILD_DIR / "lite_predictor"

from predictor_runner import NO_RACE_HOOK  # noqa: E402

# The bind-time stage keeps a compiled kernel only where it wins a timed race against the generated kernels, and
# which side wins depends on the machine. A test that checks a fusion is applied, and computes the right thing,
# needs it applied wherever the test runs, on a loaded machine too: this test-only hook (bind_time/test_hooks.h)
# keeps every compiled kernel that passes the checks, and every max_pool2d run channels_last, untimed, in every
# process the tests start. The race's own tests run without it (predictor_runner.race_on_environment).
os.environ[NO_RACE_HOOK] = "1"


@pytest.fixture(scope="session")
def predictor() -> Path:
    if not PREDICTOR.is_file():
        pytest.fail(f"{PREDICTOR} is missing: run ./build.sh (./build.sh test builds it before testing)")
    return PREDICTOR


@pytest.fixture(scope="session")
def models_dir() -> Path:
    if not (MODELS_DIR / "mobilenet_v2.ptl").is_file():
        pytest.fail(f"{MODELS_DIR} has no exported models: run ./build.sh first")
    return MODELS_DIR
