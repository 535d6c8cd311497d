"""The bind-time stage run alone: each model in `lite_predictor` at 1 thread, with the stage and with
`--no-specialize`, one fresh process each, nothing interleaved (benchmarks/latency.py interleaves).

Per model: the medians of `--iters` timed runs with and without the stage, the call sites the stage compiled
kernels for and the operator calls they cover, how many of those kept their generated kernels (never served by the
compiled one), the folded calls, the first run, and how long lite_predictor then waited for the background
preparation. The README's bind-time table is this section of report.md.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from benchmarks.figures import Section

MODELS = ("mobilenet_v2", "ssdlite_head_convs", "ssdlite_head", "ssdlite_large_head_convs", "ssdlite_large_head",
          "roi_head", "detection_ops")
ITERS = 200


def predictor_report(predictor: Path, model: Path, iters: int, *flags: str) -> dict:
    """lite_predictor's --json report of one fresh process, 1 thread; raises RuntimeError with its last error line."""
    done = subprocess.run([str(predictor), str(model), "--threads", "1", "--iters", str(iters), "--json", *flags],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def record(section: Section, name: str, staged: dict, plain: dict) -> None:
    sites = staged["specialized_sites"]
    prefix = f"bind_time/{name}"
    section.add(f"{prefix}/static_ms", staged["median_ms"], "ms", "median, with the bind-time stage")
    section.add(f"{prefix}/no_stage_ms", plain["median_ms"], "ms", "median, --no-specialize")
    section.add(f"{prefix}/kernels", len(sites), "call sites")
    section.add(f"{prefix}/calls_covered", sum(len(site["fused"]) for site in sites), "operator calls")
    section.add(f"{prefix}/kept_generated", sum(1 for site in sites if site["specialized_calls"] == 0), "call sites",
                "the generated kernels served every call (faster for the shape, or the compiled kernel differed)")
    section.add(f"{prefix}/folded_calls", len(staged["folded_calls"]), "calls")
    section.add(f"{prefix}/first_run_ms", staged["first_run_ms"], "ms")
    section.add(f"{prefix}/background_wait_ms", staged.get("background_preparation", {}).get("waited_ms", 0.0), "ms",
                "lite_predictor's wait for the background preparation after the first run")


def measure(predictor: Path, models_dir: Path, iters: int = ITERS, models: tuple[str, ...] = MODELS) -> Section:
    section = Section()
    for name in models:
        model = models_dir / f"{name}.ptl"
        if not model.is_file():
            section.skipped.append(f"bind-time {name}: {model} is missing")
            continue
        try:
            record(section, name, predictor_report(predictor, model, iters),
                   predictor_report(predictor, model, iters, "--no-specialize"))
        except RuntimeError as error:
            section.skipped.append(f"bind-time {name}: {error}")
    return section
