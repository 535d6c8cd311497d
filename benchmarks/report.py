"""report.json (every figure with its unit), report.md (the tables) and the plot, from the benchmarks' sections."""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks.figures import Section, Target, as_json
from benchmarks.latency import MODES as LATENCY_MODES
from benchmarks.per_op import MICRO_MODELS

SECTION_NAMES = ("per_op", "latency", "size")


def write_json(path: Path, sections: dict[str, Section], environment: dict) -> None:
    report = {
        "schema_version": 1,
        "environment": environment,
        **{name: as_json(section) for name, section in sections.items()},
        "targets": [t.__dict__ for s in sections.values() for t in s.targets],
        "skipped": [s for section in sections.values() for s in section.skipped],
    }
    path.write_text(json.dumps(report, indent=1) + "\n")


def _value(section: Section, name: str, fmt: str = "{:,.0f}") -> str:
    return fmt.format(section.get(name)) if section.has(name) else "–"


def _compiled_sites(section: Section, mode_prefix: str) -> str:
    """"6 / 36": of the bind-time stage's sites that ran in this mode, those on their compiled kernel; "no site"
    where the stage has none (a quantized model's convs stay LibTorch's)."""
    if not section.has(f"{mode_prefix}/stage_sites_ran"):
        return "–"
    ran = section.get(f"{mode_prefix}/stage_sites_ran")
    return f"{section.get(f'{mode_prefix}/compiled_sites')} / {ran}" if ran else "no site"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def per_op_table(section: Section) -> list[str]:
    rows = []
    for model in MICRO_MODELS:
        p = f"per_op/{model.name}"
        if not section.has(f"{p}/floor/instructions_per_op"):
            continue
        rows.append([
            f"`{model.name}`", _value(section, f"{p}/ops_per_forward"), _value(section, f"{p}/floor/instructions_per_op"),
            _value(section, f"{p}/static/above_floor"), _value(section, f"{p}/static_stock/above_floor"),
            _value(section, f"{p}/dynamic/above_floor"), _value(section, f"{p}/static_to_dynamic_above_floor", "{:.2f}"),
            _value(section, f"{p}/static_stock_to_dynamic_above_floor", "{:.2f}"),
        ])  # fmt: skip
    return _table(
        ["micro model", "op calls / forward", "floor (instr/op)", "static above floor",
         "static kernels, stock loop", "dynamic above floor", "static / dynamic", "static kernels in stock loop / dynamic"],
        rows)  # fmt: skip


def categories_table(section: Section, model: str) -> list[str]:
    detail = section.details.get(model)
    if not detail:
        return []
    by_mode = detail["above_floor_by_category"]
    modes = [m for m in ("static", "static_stock", "dynamic") if m in by_mode]
    names = sorted(set().union(*(by_mode[m] for m in modes)), key=lambda n: -by_mode["dynamic"].get(n, 0))
    rows = [[n, *(f"{by_mode[m].get(n, 0):,.0f}" for m in modes)] for n in names]
    return _table(["instructions per op call above the floor, by where they go", *modes], rows)


def top_functions_table(section: Section, model: str, mode: str, count: int = 10) -> list[str]:
    detail = section.details.get(model)
    if not detail:
        return []
    rows = [[f"`{name[:110]}`", f"{cost:,.0f}"] for name, cost in detail["top_functions_above_floor"][mode][:count]]
    return _table([f"{mode}: function (self cost)", "instr/op above floor"], rows)


def cross_check_lines(section: Section) -> list[str]:
    p = "per_op/micro_add_loop"
    if not section.has(f"{p}/static/lite_predictor_instructions_per_op"):
        return []
    return [
        "Cross-check on `lite_predictor` itself (whole program under callgrind, `--iters 1` and `3` differenced): "
        f"static {section.get(f'{p}/static/lite_predictor_instructions_per_op'):,.0f}, dynamic "
        f"{section.get(f'{p}/dynamic/lite_predictor_instructions_per_op'):,.0f} instructions per op call "
        f"(bench_per_op: {section.get(f'{p}/static/instructions_per_op'):,.0f} and "
        f"{section.get(f'{p}/dynamic/instructions_per_op'):,.0f}).",
        "",
    ]


def latency_models(section: Section) -> list[str]:
    models = []
    for figure in section.figures:
        name = figure.name.split("/")[1]
        if name not in models:
            models.append(name)
    return models


MODE_LABELS = {"static": "static", "static_plain": "static, no bind-time stage", "dynamic": "dynamic",
               "python_eager": "Python eager", "python_lite": "Python lite", "onnxruntime": "ONNX Runtime",
               "executorch": "ExecuTorch"}
# Per-round ratios the latency table shows: (numerator, denominator).
LATENCY_RATIOS = (("static", "dynamic"), ("static", "static_plain"), ("static", "onnxruntime"),
                  ("executorch", "onnxruntime"))


def _ratio_cell(section: Section, name: str) -> str:
    ratio = _value(section, name, "{:.3f}")
    return f"{ratio} ({section.get(name + '_ci95')})" if section.has(name + "_ci95") else ratio


def latency_table(section: Section, statistic: str = "median_ms") -> list[str]:
    rows = []
    for model in latency_models(section):
        for threads in (1, 2):
            p = f"latency/{model}/threads_{threads}"
            if not any(section.has(f"{p}/{m}/{statistic}") for m in LATENCY_MODES):
                continue
            row = [f"`{model}`", str(threads)] + [_value(section, f"{p}/{m}/{statistic}", "{:.2f}") for m in LATENCY_MODES]
            if statistic == "median_ms":
                row += [_ratio_cell(section, f"{p}/{a}_to_{b}") for a, b in LATENCY_RATIOS]
            rows.append(row)
    header = ["model", "threads", *(f"{MODE_LABELS[m]} (ms)" for m in LATENCY_MODES)]
    if statistic == "median_ms":
        header += [f"{MODE_LABELS[a]} / {MODE_LABELS[b]}, per round (95% interval)" for a, b in LATENCY_RATIOS]
    return _table(header, rows)


def cold_table(section: Section) -> list[str]:
    rows = []
    for model in latency_models(section):
        for mode in LATENCY_MODES:
            p = f"latency/{model}/cold/{mode}"
            if section.has(f"{p}/load_ms"):
                to_ort = f"latency/{model}/cold/{mode}_to_onnxruntime_load_plus_first"
                rows.append([f"`{model}`", MODE_LABELS[mode], _value(section, f"{p}/load_ms", "{:.1f}"),
                             _value(section, f"{p}/first_inference_ms", "{:.1f}"),
                             _value(section, f"{p}/load_plus_first_ms", "{:.1f}"), _value(section, to_ort, "{:.2f}"),
                             _value(section, f"latency/{model}/threads_1/{mode}/load_ms", "{:.1f}")])
    return _table(["model", "mode", "load, fresh process (ms)", "first inference, fresh process (ms)",
                   "load + first (ms)", "load + first / ONNX Runtime's", "load, warm process (ms)"], rows)


def size_table(section: Section) -> list[str]:
    rows = []
    for label, p in (("default selection", "size/selected"), ("`--all-ops`", "size/all_ops")):
        if not section.has(f"{p}/object_bytes"):
            continue
        rows.append([
            label, _value(section, f"{p}/generated_ops"), _value(section, f"{p}/object_bytes"),
            _value(section, f"{p}/loadable_bytes"), _value(section, f"{p}/object_bytes_per_op"),
            _value(section, f"{p}/loadable_bytes_per_op"), _value(section, f"{p}/codegen_s", "{:.1f}"),
            _value(section, f"{p}/build_span_s", "{:.0f}"), _value(section, f"{p}/compile_s_summed", "{:.0f}"),
        ])  # fmt: skip
    return _table(["generated code", "ops", "object bytes", "loadable bytes", "object B/op", "loadable B/op",
                   "codegen (s)", "build (s, wall)", "compile (s, summed)"], rows)  # fmt: skip


def backend_cost_table(section: Section) -> list[str]:
    rows = []
    for f in section.figures:
        parts = f.name.split("/")
        if len(parts) == 4 and parts[3] == "added":
            model, op = parts[1], parts[2]
            rows.append([f"`{model}`", f"`{op}`", _value(section, f"backend_cost/{model}/{op}/cpu_only", "{:.1f}"),
                         _value(section, f"backend_cost/{model}/{op}/cpu_quantizedcpu", "{:.1f}"), f"{f.value:+.1f}"])
    if not rows:
        return []
    return _table(["micro model", "operator", "CPU only", "CPU;QuantizedCPU", "added by the check"], rows)


def bind_time_table(section: Section) -> list[str]:
    """benchmarks/bind_time_alone.py's figures: one row per model it ran."""
    models = [f.name.split("/")[1] for f in section.figures if f.name.endswith("/static_ms")]
    rows = []
    for model in models:
        def cell(figure: str, fmt: str = "{:,.0f}", model: str = model) -> str:
            return _value(section, f"bind_time/{model}/{figure}", fmt)
        kept = section.get(f"bind_time/{model}/kept_generated")
        keeping = {0: "", 1: "; 1 keeps its generated kernels"}.get(kept, f"; {kept} keep their generated kernels")
        kernels = f"{cell('kernels')} ({cell('calls_covered')} operator calls{keeping})"
        rows.append([f"`{model}`", cell("static_ms", "{:.3f} ms"), cell("no_stage_ms", "{:.3f} ms"), kernels,
                     cell("folded_calls"), cell("first_run_ms", "{:.1f} ms"), cell("background_wait_ms", "{:.0f} ms")])
    if not rows:
        return []
    return _table(["model", "static, bind-time stage", "static, no stage", "kernels (calls they cover)", "folded calls",
                   "first run", "background preparation"], rows)


def _marked(section: Section, name: str, limit: float) -> str:
    """A per-round ratio with its interval and whether it meets `limit` (✓ met, ✗ missed)."""
    if not section.has(name):
        return "–"
    value = section.get(name)
    return f"{value:.3f} {'✓' if value <= limit else '✗'} ({section.get(name + '_ci95')})"


def real_models_names(section: Section) -> list[str]:
    names = []
    for figure in section.figures:
        name = figure.name.split("/")[1]
        if name not in names:
            names.append(name)
    return names


def real_models_table(section: Section) -> list[str]:
    """Per model and thread count: ms per mode, and the issue's ratios, each marked met or missed."""
    from benchmarks import real_models_bench as real

    rows = []
    for model in real_models_names(section):
        for threads in (1, 2):
            p = f"real_models/{model}/threads_{threads}"
            if not section.has(f"{p}/rounds"):
                continue
            peer = section.get(f"{p}/best_peer") if section.has(f"{p}/best_peer") else None
            rows.append([f"`{model}`", str(threads), str(section.get(f"{p}/rounds")),
                         *(_value(section, f"{p}/{m}/median_ms", "{:.2f}") for m in real.MODES),
                         real.MODE_LABELS[peer] if peer else "–",
                         _marked(section, f"{p}/static_to_best_peer", real.PEER_TARGET),
                         _marked(section, f"{p}/static_frozen_to_best_peer", real.PEER_TARGET),
                         _marked(section, f"{p}/static_to_static_frozen", real.FROZEN_TARGET),
                         _marked(section, f"{p}/static_to_static_plain", real.STAGE_TARGET),
                         _marked(section, f"{p}/static_frozen_to_static_plain_frozen", real.STAGE_TARGET),
                         "; ".join(_compiled_sites(section, f"{p}/{m}") for m in real.STAGE_MODES)])
    return _table(["model", "threads", "rounds", *(f"{real.MODE_LABELS[m]} (ms)" for m in real.MODES), "best peer",
                   f"static / best peer (≤ {real.PEER_TARGET})", f"frozen / best peer (≤ {real.PEER_TARGET})",
                   f"unfrozen / frozen (≤ {real.FROZEN_TARGET})", f"stage / no stage (≤ {real.STAGE_TARGET})",
                   f"frozen: stage / no stage (≤ {real.STAGE_TARGET})",
                   "sites on compiled kernels (static; frozen)"], rows)


def real_models_cold_table(section: Section) -> list[str]:
    from benchmarks import real_models_bench as real

    rows = []
    for model in real_models_names(section):
        p = f"real_models/{model}/cold"
        if not any(section.has(f"{p}/{m}/load_plus_first_ms") for m in real.COLD_MODES):
            continue
        cells = []
        for mode in real.COLD_MODES:
            if section.has(f"{p}/{mode}/load_plus_first_ms"):
                cells.append(f"{section.get(f'{p}/{mode}/load_plus_first_ms'):.1f} "
                             f"({section.get(f'{p}/{mode}/load_ms'):.1f} + {section.get(f'{p}/{mode}/first_inference_ms'):.1f})")
            else:
                cells.append("–")
        ratios = []
        for mode in ("static", "static_frozen"):
            name = f"{p}/{mode}_to_best_peer_load_plus_first"
            ratios.append(f"{section.get(name):.2f} {'✓' if section.get(name) <= real.COLD_TARGET else '✗'}"
                          if section.has(name) else "–")
        rows.append([f"`{model}`", *cells, *ratios])
    return _table(["model", *(f"{real.MODE_LABELS[m]}: load + first (ms)" for m in real.COLD_MODES),
                   f"static / best peer (≤ {real.COLD_TARGET})", f"frozen / best peer (≤ {real.COLD_TARGET})"], rows)


def real_models_layers_table(section: Section) -> list[str]:
    """Per model: ms per run in each kind of layer, ours (the model as saved, stage on) / ORT's own profile."""
    from benchmarks import layer_profile

    profiles = section.details.get("layer_profile", {})
    kinds = [k for k in layer_profile.KINDS
             if any(max(p["static"][k], p["onnxruntime"][k]) >= 0.05 for p in profiles.values())]
    rows = []
    for model, profile in profiles.items():
        ours, ort = profile["static"], profile["onnxruntime"]
        rows.append([f"`{model}`", *(f"{ours[k]:.2f} / {ort[k]:.2f}" for k in kinds),
                     f"{sum(ours.values()):.2f} / {sum(ort.values()):.2f}"])
    return _table(["model", *kinds, "all"], rows) if rows else []


def auto_engines_lines(section: Section) -> list[str]:
    """The int8 models with --qengine auto (opt-in: results may move by a quantization step per call), one line
    per model and thread count, and their cold start."""
    from benchmarks import real_models_bench as real

    lines = []
    for name in real.INT8_MODELS:
        for key in sorted(f.name for f in section.figures if f.name.startswith(f"real_models/{name}/threads_")
                          and f.name.endswith("/static_auto/median_ms")):
            p = key.removesuffix("/static_auto/median_ms")
            threads = p.rsplit("_", 1)[1]
            peer = section.get(f"{p}/best_peer") if section.has(f"{p}/best_peer") else None
            parts = [f"`{name}` with `--qengine auto`, {threads} thread(s): {section.get(key):.2f} ms"]
            if peer is not None and section.has(f"{p}/static_auto_to_best_peer"):
                parts.append(f"{_marked(section, f'{p}/static_auto_to_best_peer', real.PEER_TARGET)} of "
                             f"{real.MODE_LABELS.get(peer, peer)}'s")
            if section.has(f"{p}/static_auto_to_static"):
                parts.append(f"{section.get(f'{p}/static_auto_to_static'):.3f} of the loaded engine's packings "
                             "(static, stage on)")
            if section.has(f"{p}/static_auto/compiled_sites"):
                parts.append(f"{section.get(f'{p}/static_auto/compiled_sites')} of "
                             f"{section.get(f'{p}/static_auto/stage_sites_ran')} quantized call sites on another "
                             "engine")
            lines.append("- " + "; ".join(parts))
        cold = f"real_models/{name}/cold"
        if section.has(f"{cold}/static_auto/load_plus_first_ms"):
            lines.append(f"- `{name}` with `--qengine auto`, load + first run: "
                         f"{section.get(f'{cold}/static_auto/load_plus_first_ms'):.1f} ms (load "
                         f"{section.get(f'{cold}/static_auto/load_ms'):.1f}, repacking its weights for the other "
                         "engine included): "
                         f"{section.get(f'{cold}/static_auto_to_best_peer_load_plus_first'):.2f} of the best peer's")
    return ([f"With `--qengine auto` (opt-in: each quantized conv and linear on the engine fastest for it, within "
             "one quantization step of the loaded engine's result at each call):", "", *lines, ""] if lines else [])


def real_models_lines(section: Section) -> list[str]:
    """report.md's section for benchmarks/real_models_bench.py."""
    if not section.figures and not section.skipped:
        return []
    from benchmarks import real_models_bench as real

    lines = [
        "## 4. Real models (issue 21): torchvision classifiers, an int8 MobileNetV2, DistilBERT",
        "",
        "Exported in the peers' environment by `benchmarks/real_models.py` (random seeded weights, saved unfrozen as",
        "users save them and frozen) into `build/real_models/`, run by `build_real/`'s `bench_latency_server`, built",
        "with `-DSELECTED_MODELS=build/real_models/` (exactly their operators). *static*: the model as saved, with",
        "the bind-time stage; *no stage*: `--no-specialize`; *frozen*: `NAME_frozen.ptl`. The peers load the",
        "exported `.onnx` / `.pte`; `mobilenet_v2_int8`'s ONNX Runtime file is ORT's own static QDQ int8 model of",
        "the same float network. Medians of interleaved rounds (each round every mode once, in a fresh random",
        "order, each stage / no-stage pair adjacent); ratios are medians of per-round ratios (95% bootstrap",
        "interval). The best peer is the peer with the lower median at that model and thread count. ✓ met, ✗",
        f"missed. Slow models run fewer rounds ({', '.join(f'{m}: {n}' for m, n in real.ROUNDS_CAP.items())}; the",
        "rounds column).",
        "",
        *real_models_table(section),
        "",
        "Load + first run, fresh processes, 1 thread: `lite_predictor --json` (its load includes the archive",
        "checks and binding; the stage prepares its compiled kernels in the background after the first run)",
        "against ORT's session creation and ExecuTorch's program and method load, each + its first run (ms:",
        "load + first), medians of `--cold-reps` processes (fewer for "
        f"{', '.join(f'{m}: {n}' for m, n in real.COLD_REPS_CAP.items())}):",
        "",
        *real_models_cold_table(section),
        "",
        *auto_engines_lines(section),
    ]
    if section.details.get("layer_profile"):
        lines += [
            "Where the time goes, per kind of layer (ms per run, ours / ONNX Runtime): `lite_predictor --profile-ops`",
            "on the model as saved (stage on; a conv counts with the activations fused into it) beside ORT's own",
            "profiler on its file (`benchmarks/ort_layer_profile.py`; its convs carry their activations too, except",
            "SiLU, which it runs as QuickGelu), 1 thread, each its own per-call timer, so the sums exceed an untimed",
            "run (`benchmarks/layer_profile.py` says which operator goes to which kind):",
            "",
            *real_models_layers_table(section),
            "",
        ]
    manifest = section.details.get("manifest", {})
    for model, checks in manifest.get("peer_checks", {}).items():
        for kind, check in checks.items():
            lines += [f"`{model}`'s `.{kind}` is checked against `{check['expected']}`, not `{model}.expected.pt`: "
                      f"{check['why']}.", ""]
    return lines


def targets_list(targets: list[Target]) -> list[str]:
    mark = {True: "met", False: "**missed**", None: "not judged"}
    return [f"- {mark[t.met]}: {t.name} ({t.detail})" for t in targets]


def write_markdown(path: Path, sections: dict[str, Section], environment: dict, plot_name: str) -> None:
    per_op, latency, size = (sections.get(n, Section()) for n in SECTION_NAMES)
    lines = [
        "# lightweight dispatch benchmarks",
        "",
        f"{environment['generated_at']} · torch {environment['torch']} · {environment['cpus']} CPUs · load average "
        f"{environment['load_average_start']} at start, {environment['load_average_end']} at end · "
        f"commit {environment['commit']}",
        "",
        f"![benchmarks]({plot_name})",
        "",
        "## Targets",
        "",
        *targets_list([t for s in sections.values() for t in s.targets]),
        "",
        "## 1. Per-op overhead (callgrind, instructions per op call)",
        "",
        "Floor: the same kernels called from C++ (`benchmarks/kernel_floor.cpp`). *static*: generated kernels run by",
        "lite_predictor's own interpreter loop (what `lite_predictor` runs by default); *static kernels, stock loop*:",
        "the same bound module run by LibTorch's interpreter (`--interpreter stock`), which separates the loop's cost",
        "from the kernel call's; *dynamic*: the stock interpreter and the dispatcher.",
        "",
        *per_op_table(per_op),
        "",
        *categories_table(per_op, "micro_add_loop"),
        "",
        *top_functions_table(per_op, "micro_add_loop", "static"),
        "",
        *top_functions_table(per_op, "micro_add_loop", "dynamic"),
        "",
        *cross_check_lines(per_op),
        "### What the per-call backend choice costs a float op",
        "",
        "Instructions per call in each generated function itself (callgrind self cost, static mode), in this build",
        "(`STATIC_DISPATCH_BACKEND=CPU;QuantizedCPU`) and in a CPU-only build of the same micro models",
        "(`build_cpu_only/`). Operators without a QuantizedCPU kernel (`aten::add.Tensor`) have no check; tensor",
        "lists are checked out of line by `holds_quantized_tensor`, whose cost is included in its callers' rows.",
        "",
        *backend_cost_table(sections.get("backend_cost", Section())),
        "",
        "## 2. End-to-end latency (median of interleaved runs after warm-up)",
        "",
        "Each round runs every mode once, in a fresh random order (static and dynamic adjacent); a ratio is the",
        "median over rounds of the two modes' times in the same round, with a bootstrap 95% interval. The detection",
        "heads' `torchvision::` ops run in Python as plain-torch reference implementations (no torchvision beside",
        "this wheel): their Python columns are not torchvision's speed. The peers (ONNX Runtime, ExecuTorch +",
        "XNNPACK) run files exported from the same eager model, checked against its outputs on their first run; a",
        "model a peer's exporter cannot express is listed under Skipped with the reason.",
        "",
        *latency_table(latency),
        "",
        "Warm caches, for scale: bursts of 5 consecutive runs per mode, bursts interleaved the same way, first run",
        "of each burst dropped (a single interleaved run follows other processes' runs, which evict the model):",
        "",
        *latency_table(latency, "warm_burst_median_ms"),
        "",
        "Load and first inference, each in a fresh process (1 thread; `lite_predictor --json` for static and dynamic,",
        "whose load includes its archive checks; ONNX Runtime's load is session creation, ExecuTorch's loading the",
        "program and its method), and the load again in the warm benchmark process (LibTorch's loader plus, for",
        "static, binding):",
        "",
        *cold_table(latency),
        "",
        "### The bind-time stage run alone",
        "",
        "Each model in a fresh `lite_predictor --threads 1 --iters 200 --json` process, with the stage and with",
        "`--no-specialize`, one after the other (nothing interleaved): medians of the 200 runs; the stage's kernels,",
        "the operator calls they cover and those whose generated kernels served every call; folded calls; the first",
        "run; and how long lite_predictor then waited for the background preparation (`benchmarks/bind_time_alone.py`):",
        "",
        *bind_time_table(sections.get("bind_time", Section())),
        "",
        "## 3. Size and build time of the generated code",
        "",
        *size_table(size),
        "",
    ]
    if size.has("size/selected_fraction_of_all_ops/ops"):
        lines += [
            f"The selection is {size.get('size/selected_fraction_of_all_ops/ops'):.1%} of the ops; its generated "
            f"code is {size.get('size/selected_fraction_of_all_ops/loadable_bytes'):.1%} of all-ops' (loadable "
            "bytes). At equal bytes per op the two fractions would be equal, so a size fraction below the ops "
            "fraction needs selected ops cheaper than the average op; here a selected op costs "
            f"{size.get('size/selected_per_op_over_all_ops_per_op/loadable_bytes'):.2f} x an average op (without "
            f"the shared conversion helpers, {size.get('size/selected/helpers_loadable_bytes') / 1e3:.0f} kB in "
            "each build). Generated code compiled with "
            f"`{size.get('size/generated_code_optimization')}` (all-ops: "
            f"`{size.get('size/all_ops/generated_code_optimization')}`; CMake `GENERATED_CODE_OPTIMIZATION`).",
            "",
        ]
    if size.has("size/lite_predictor/file_bytes"):
        lines += [
            f"`lite_predictor` itself: {size.get('size/lite_predictor/file_bytes'):,} bytes "
            f"({size.get('size/lite_predictor/loadable_bytes'):,} loadable, of which the generated functions "
            f"{size.get('size/lite_predictor/generated_function_bytes'):,}); it links LibTorch's shared libraries "
            f"(`libtorch_cpu.so` alone is {size.get('size/libtorch_cpu_so/file_bytes') / 1e6:,.0f} MB).",
            "",
        ]
    deployed = [f for f in size.figures if f.name.startswith("size/deployment/") and f.name.endswith("/file_bytes")]
    if deployed:
        rows = [[f"`{f.name.split('/')[2]}`", f"{f.value:,}",
                 f"{size.get(f.name.replace('/file_bytes', '/stripped_bytes')):,}"] for f in deployed]
        lines += ["What a deployment of `lite_predictor` carries: its binary and the LibTorch shared libraries it loads",
                  "(`ldd`), as shipped and stripped (`strip --strip-unneeded`):", "",
                  *_table(["file", "bytes", "stripped"], rows), ""]
    notes = [f.note for f in size.figures if f.name == "size/all_ops/object_bytes"]
    if notes:
        lines += [f"All-ops figures: {notes[0]}.", ""]
    lines += real_models_lines(sections.get("real_models", Section()))
    skipped = [s for section in sections.values() for s in section.skipped]
    if skipped:
        lines += ["## Skipped", "", *(f"- {s}" for s in skipped), ""]
    path.write_text("\n".join(lines))


def plot(path: Path, sections: dict[str, Section]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_op, latency, size = (sections.get(n, Section()) for n in SECTION_NAMES)
    real = sections.get("real_models", Section())
    panels = [(per_op, _plot_per_op, 1.0), (latency, _plot_latency, 2.4), (size, _plot_size, 0.6)]
    if real.figures:
        panels.append((real, _plot_real_models, 1.6))
    fig, axes = plt.subplots(1, len(panels), figsize=(18 + 7 * (len(panels) - 3), 5.6),
                             gridspec_kw={"width_ratios": [w for _, _, w in panels]})
    for ax, (section, draw, _) in zip(axes, panels):
        if section.figures:
            draw(ax, section)
        else:
            ax.set_axis_off()
            ax.text(0.5, 0.5, "not run", ha="center", va="center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


STATIC, DYNAMIC, SHARED, GREY, BLUE = "#2b8a3e", "#c92a2a", "#8fb3d9", "#868e96", "#1971c2"


def _plot_per_op(ax, section: Section) -> None:
    from matplotlib.patches import Patch

    models = [m for m in MICRO_MODELS if section.has(f"per_op/{m.name}/floor/instructions_per_op")]
    bars = ((-0.27, "static", STATIC), (0.0, "static_stock", SHARED), (0.27, "dynamic", DYNAMIC))
    for i, model in enumerate(models):
        p = f"per_op/{model.name}"
        for offset, mode, color in bars:
            ax.bar(i + offset, section.get(f"{p}/{mode}/above_floor"), 0.26, color=color)
        target = 0.5 * section.get(f"{p}/dynamic/above_floor")
        ax.hlines(target, i - 0.4, i + 0.4, colors="black", linestyles="dashed", linewidth=1)
    ax.set_ylim(0, 1.35 * max(section.get(f"per_op/{m.name}/dynamic/above_floor") for m in models))
    labels = [f"{m.name.removeprefix('micro_')}\n(floor {section.get(f'per_op/{m.name}/floor/instructions_per_op'):,.0f})"
              for m in models]
    ax.set_xticks(range(len(models)), labels, fontsize=8)
    ax.set_ylabel("instructions per op call above the kernel floor")
    ax.set_title("Per-op overhead (callgrind)")
    ax.legend(handles=[Patch(color=STATIC, label="static (lite_predictor's loop)"),
                       Patch(color=SHARED, label="static kernels, stock loop"), Patch(color=DYNAMIC, label="dynamic"),
                       matplotlib_line("target for static: half of dynamic's")], fontsize=7, loc="upper left")


def matplotlib_line(label: str):
    from matplotlib.lines import Line2D

    return Line2D([0], [0], color="black", linestyle="dashed", linewidth=1, label=label)


def _plot_latency(ax, section: Section) -> None:
    groups = [(m, t) for m in latency_models(section) for t in (1, 2)
              if section.has(f"latency/{m}/threads_{t}/dynamic/median_ms")]
    colors = {"static": STATIC, "static_plain": "#74c476", "python_eager": GREY, "python_lite": BLUE, "onnxruntime": "#e69f00",
              "executorch": "#9c36b5"}
    width = 0.8 / len(colors)
    for i, mode in enumerate(colors):
        values = []
        for m, t in groups:
            p = f"latency/{m}/threads_{t}"
            values.append(section.get(f"{p}/{mode}/median_ms") / section.get(f"{p}/dynamic/median_ms")
                          if section.has(f"{p}/{mode}/median_ms") else 0)
        offset = (i - (len(colors) - 1) / 2) * width
        ax.bar([g + offset for g in range(len(groups))], values, width, label=MODE_LABELS[mode], color=colors[mode])
    ax.axhline(1.0, color=DYNAMIC, linewidth=1, label="dynamic (= 1)")
    ax.axhline(1.03, color="black", linestyle="dashed", linewidth=1, label="target for static: 1.03")
    labels = [f"{m} ({t}t) {section.get(f'latency/{m}/threads_{t}/dynamic/median_ms'):.2f} ms" for m, t in groups]
    ax.set_xticks(range(len(groups)), labels, fontsize=6.5, rotation=40, ha="right", rotation_mode="anchor")
    # Log scale: the detection heads' Python columns run plain-torch reference ops, tens of times slower.
    ax.set_yscale("log", base=2)
    ax.set_ylabel("median latency / dynamic's median (log scale)")
    ax.set_title("End to end, interleaved (x labels: dynamic's median)")
    ax.legend(fontsize=7)


def _plot_size(ax, section: Section) -> None:
    """Loadable bytes per generated op, the shared helpers left out: the size target compares these two."""
    labels = ["default\nselection", "--all-ops"]
    helpers = section.get("size/selected/helpers_loadable_bytes")
    ops = [section.get("size/selected/generated_ops"), section.get("size/all_ops/generated_ops")]
    totals = [section.get("size/selected/loadable_bytes"), section.get("size/all_ops/loadable_bytes")]
    values = [(total - helpers) / count for total, count in zip(totals, ops)]
    bars = ax.bar(labels, values, color=[STATIC, GREY])
    for bar, count, total in zip(bars, ops, totals):
        ax.annotate(f"{count} ops, {total / 1e3:,.0f} kB", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.axhline(values[1], color="black", linestyle="dashed", linewidth=1, label="target: <= all-ops' bytes per op")
    ax.set_ylabel("loadable bytes per generated op (helpers excluded)")
    ax.set_title("Generated code size per op")
    ax.legend(fontsize=7)


def _plot_real_models(ax, section: Section) -> None:
    """Ours / the best peer per real model and thread count (median per-round ratios), unfrozen and frozen."""
    groups = [(m, t) for m in real_models_names(section) for t in (1, 2)
              if section.has(f"real_models/{m}/threads_{t}/best_peer")]
    for offset, mode, color, label in ((-0.2, "static", STATIC, "static (as saved) / best peer"),
                                       (0.2, "static_frozen", "#74c476", "frozen / best peer")):
        values = [section.get(f"real_models/{m}/threads_{t}/{mode}_to_best_peer")
                  if section.has(f"real_models/{m}/threads_{t}/{mode}_to_best_peer") else 0 for m, t in groups]
        ax.bar([g + offset for g in range(len(groups))], values, 0.38, color=color, label=label)
    ax.axhline(1.0, color="black", linestyle="dashed", linewidth=1, label="target: <= 1.0")
    labels = [f"{m} ({t}t) {section.get(f'real_models/{m}/threads_{t}/best_peer')}" for m, t in groups]
    ax.set_xticks(range(len(groups)), labels, fontsize=6.5, rotation=40, ha="right", rotation_mode="anchor")
    ax.set_yscale("log", base=2)  # a 2-thread run on a busy machine can be many times off
    ax.set_ylabel("median per-round ratio to the best peer (log scale)")
    ax.set_title("Real models (issue 21) against the best peer")
    ax.legend(fontsize=7)
