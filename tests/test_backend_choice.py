"""Per op, the generated function picks the kernel of its tensor arguments' backend: observed in C++ by
interposing the kernels themselves (tests/cpp/backend_choice_check.cpp), not inferred from results."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_quantized_and_float_tensors_reach_their_own_kernels() -> None:
    program = REPO_ROOT / "build" / "backend_choice_check"
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "ok   aten::dequantize.self on a quantized tensor -> at::native::dequantize_quantized" in lines
    assert "ok   aten::dequantize.self on a float tensor -> at::cpu::dequantize" in lines
    assert "ok   aten::cat on quantized tensors -> at::native::cat_quantized_cpu" in lines
    assert lines[-1] == "backend_choice_check: 6 passed, 0 failed"
