"""The benchmarks' own arithmetic and assumptions (`.venv/bin/python -m pytest benchmarks`): fast, no build needed."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.callgrind_profile import per_unit_self_cost, read_dump  # noqa: E402
from benchmarks.figures import Section  # noqa: E402
from benchmarks.latency import paired_ratio_interval, round_order  # noqa: E402
from benchmarks.per_op import MICRO_MODELS, category_of, loop_body_ops  # noqa: E402
from benchmarks.size import judge  # noqa: E402

CALLGRIND_DUMP = """\
# callgrind format
version: 1
desc: Trigger: Client Request: micro_add_loop|static|{k}
positions: line
events: Ir
summary: {total}

ob=(1) /lib/libtorch_cpu.so
fl=(1) ???
fn=(1) torch::jit::mobile::InterpreterState::run(std::vector<c10::IValue>&)
0 {run}
cfn=(2) at::cpu::add(at::Tensor const&, at::Tensor const&, c10::Scalar const&)
calls={k} 0
0 999999
fn=(2)
0 {add}
ob=(2) /bin/bench_per_op
fn=(3) c10::IValue::toScalar() const
0 {scalar}
"""


def write_dump(path: Path, k: int) -> Path:
    path.write_text(CALLGRIND_DUMP.format(k=k, total=1000 * k, run=500 * k, add=450 * k, scalar=50 * k))
    return path


@pytest.mark.parametrize("model", MICRO_MODELS, ids=lambda m: m.name)
def test_declared_ops_per_iteration_match_the_scripted_loop(model) -> None:
    assert loop_body_ops(model) == list(model.ops_per_iteration)


def test_dump_total_and_label_are_read(tmp_path: Path) -> None:
    dump = read_dump(write_dump(tmp_path / "callgrind.out.1.1", 2))
    assert dump.label == "micro_add_loop|static|2"
    assert dump.total == 2000


def test_self_cost_excludes_callees_inclusive_cost(tmp_path: Path) -> None:
    dump = read_dump(write_dump(tmp_path / "callgrind.out.1.1", 2))
    run = next(cost for name, cost in dump.self_cost.items() if name.startswith("torch::jit::mobile::Interpreter"))
    assert run == 1000  # the 999999 after calls= belongs to at::cpu::add's inclusive cost
    assert dump.self_cost["c10::IValue::toScalar() const"] == 100


def test_compressed_names_resolve_to_their_first_definition(tmp_path: Path) -> None:
    dump = read_dump(write_dump(tmp_path / "callgrind.out.1.1", 2))
    assert dump.self_cost["at::cpu::add(at::Tensor const&, at::Tensor const&, c10::Scalar const&)"] == 900


def test_per_unit_cost_is_the_difference_between_two_dumps(tmp_path: Path) -> None:
    small = read_dump(write_dump(tmp_path / "callgrind.out.1.1", 2))
    large = read_dump(write_dump(tmp_path / "callgrind.out.1.2", 5))
    costs = per_unit_self_cost(small, large, units=3)
    assert costs["c10::IValue::toScalar() const"] == pytest.approx(50)


def test_interpreter_functions_are_attributed_to_the_interpreter() -> None:
    assert category_of("at::RecordFunction::RecordFunction(at::RecordScope)") == "interpreter and RecordFunction"
    assert category_of("lightweight_dispatch::generated::aten_add_Tensor(std::vector<c10::IValue>&)") == (
        "generated kernels and binding")
    assert category_of("c10::Dispatcher::callBoxed(c10::OperatorHandle const&)") == "dispatcher and boxed wrappers"


def test_static_and_dynamic_run_adjacent_in_every_round() -> None:
    rng = random.Random(1)
    for _ in range(50):
        order = round_order(["static", "dynamic", "python_eager", "python_lite"], rng)
        assert sorted(order) == ["dynamic", "python_eager", "python_lite", "static"]
        assert abs(order.index("static") - order.index("dynamic")) == 1


def test_ratio_interval_brackets_the_median() -> None:
    rounds = [{"static": 1.0 + 0.01 * i, "dynamic": 1.0} for i in range(-10, 11)]
    low, high = paired_ratio_interval(rounds)
    assert low <= 1.0 <= high


def _size_section(selected_ops: int, selected_bytes: int, all_ops: int, all_bytes: int, helpers: int) -> Section:
    section = Section()
    for prefix, ops, loadable in (("size/selected", selected_ops, selected_bytes), ("size/all_ops", all_ops, all_bytes)):
        section.add(f"{prefix}/generated_ops", ops, "ops")
        section.add(f"{prefix}/object_bytes", 3 * loadable, "bytes")
        section.add(f"{prefix}/loadable_bytes", loadable, "bytes")
    section.add("size/selected/helpers_loadable_bytes", helpers, "bytes")
    return section


def test_size_judgement_reports_the_op_share_and_compares_ops_without_the_shared_helpers() -> None:
    # 10 of 1000 ops at 500 B each plus 20 kB of helpers in both builds: the same bytes per op.
    section = _size_section(10, 20_000 + 10 * 500, 1000, 20_000 + 1000 * 500, 20_000)
    judge(section)
    assert section.get("size/selected_fraction_of_all_ops/ops") == 0.01
    assert section.get("size/selected_per_op_over_all_ops_per_op/loadable_bytes") == 1.0
    assert section.get("size/selected_fraction_of_all_ops/loadable_bytes") == round(25_000 / 520_000, 4)
    assert [t.met for t in section.targets] == [True]  # equal bytes per op meets the per-op target


def test_size_target_is_missed_when_selected_ops_cost_more_than_the_average_op() -> None:
    section = _size_section(10, 1_000 + 10 * 750, 1000, 1_000 + 1000 * 500, 1_000)
    judge(section)
    assert section.get("size/selected_per_op_over_all_ops_per_op/loadable_bytes") == 1.5
    assert [t.met for t in section.targets] == [False]


def test_ratio_to_onnxruntime_is_per_round_and_judged_against_the_issue_target() -> None:
    from benchmarks.latency import Samples, record_ratio_to_ort

    samples = Samples(rounds=[{"static": 12.0, "onnxruntime": 10.0}, {"static": 11.0, "onnxruntime": 10.0},
                              {"static": 13.0, "onnxruntime": 10.0}])
    section = Section()
    record_ratio_to_ort("mobilenet_v2", 1, samples, section)
    assert section.get("latency/mobilenet_v2/threads_1/static_to_onnxruntime") == 1.2
    (target,) = section.targets
    assert target.met is False and "static <= 1.0 x ONNX Runtime" in target.name


def test_a_model_onnxruntime_cannot_run_has_no_ratio_and_says_why() -> None:
    from benchmarks.latency import Samples, record_ratio_to_ort

    samples = Samples(rounds=[{"static": 1.0}], failed={"onnxruntime": "UnsupportedOperatorError: torchvision::nms"})
    section = Section()
    record_ratio_to_ort("mobilenet_v2", 2, samples, section)
    assert not section.has("latency/mobilenet_v2/threads_2/static_to_onnxruntime")
    (target,) = section.targets
    assert target.met is None and "torchvision::nms" in target.detail
    record_ratio_to_ort("roi_head", 1, samples, section)  # no target set for it: nothing recorded
    assert len(section.targets) == 1


# ------------------------------------------------------------------------------------------- the peers


def test_issue_targets_against_onnxruntime_are_set_for_every_bench_model_it_names() -> None:
    from benchmarks.latency import COLD_START_TARGETS, LATENCY_MODELS, ORT_TARGETS

    assert ORT_TARGETS[("mobilenet_v2", 1)] == 1.0 and ORT_TARGETS[("mobilenet_v2", 2)] == 1.1
    for threads in (1, 2):
        assert ORT_TARGETS[("ssdlite_head_convs", threads)] == 1.5
        assert ORT_TARGETS[("ssdlite_head", threads)] == 2.0
        assert ORT_TARGETS[("ssdlite_large_head_convs", threads)] == 1.2
        assert ORT_TARGETS[("ssdlite_large_head", threads)] == 1.2
    assert COLD_START_TARGETS == {"mobilenet_v2": 1.5}
    assert {model for model, _ in ORT_TARGETS} <= set(LATENCY_MODELS)


def test_executorch_gets_a_ratio_to_onnxruntime_but_no_target() -> None:
    from benchmarks.latency import Samples, record_ratio_to_ort

    samples = Samples(rounds=[{"static": 2.0, "executorch": 1.5, "onnxruntime": 1.0},
                              {"static": 2.2, "executorch": 1.4, "onnxruntime": 1.0},
                              {"static": 2.4, "onnxruntime": 1.0}])  # a round without ExecuTorch
    section = Section()
    record_ratio_to_ort("mobilenet_v2", 1, samples, section)
    assert section.get("latency/mobilenet_v2/threads_1/static_to_onnxruntime") == 2.2
    assert section.get("latency/mobilenet_v2/threads_1/executorch_to_onnxruntime") == 1.45
    assert [t.name.split(":")[1].split("(")[0].strip() for t in section.targets] == ["static <= 1.0 x ONNX Runtime"]


def _cold(section: Section, model: str, mode: str, load: float, first: float) -> None:
    section.add(f"latency/{model}/cold/{mode}/load_ms", load, "ms")
    section.add(f"latency/{model}/cold/{mode}/first_inference_ms", first, "ms")
    section.add(f"latency/{model}/cold/{mode}/load_plus_first_ms", load + first, "ms")


def test_start_up_target_compares_load_plus_first_run_with_onnxruntimes() -> None:
    from benchmarks.latency import record_cold_ratio_to_ort

    section = Section()
    _cold(section, "mobilenet_v2", "static", 20.0, 25.0)
    _cold(section, "mobilenet_v2", "onnxruntime", 25.0, 10.0)
    _cold(section, "mobilenet_v2", "executorch", 10.0, 4.0)
    record_cold_ratio_to_ort("mobilenet_v2", section)
    assert section.get("latency/mobilenet_v2/cold/static_to_onnxruntime_load_plus_first") == round(45 / 35, 3)
    assert section.get("latency/mobilenet_v2/cold/executorch_to_onnxruntime_load_plus_first") == 0.4
    (target,) = section.targets
    assert target.met is True and "<= 1.5 x ONNX Runtime's session creation + first run" in target.name
    assert "static 45.0 ms (20.0 + 25.0), ONNX Runtime 35.0 ms (25.0 + 10.0)" in target.detail


def test_start_up_target_is_missed_beyond_the_ratio_and_not_judged_without_onnxruntime() -> None:
    from benchmarks.latency import record_cold_ratio_to_ort

    section = Section()
    _cold(section, "mobilenet_v2", "static", 40.0, 20.0)
    _cold(section, "mobilenet_v2", "onnxruntime", 30.0, 9.0)
    record_cold_ratio_to_ort("mobilenet_v2", section)
    assert [t.met for t in section.targets] == [False]
    alone = Section()
    _cold(alone, "mobilenet_v2", "static", 40.0, 20.0)
    record_cold_ratio_to_ort("mobilenet_v2", alone, "ImportError: onnxruntime")
    assert [(t.met, t.detail) for t in alone.targets] == [(None, "ImportError: onnxruntime")]
    record_cold_ratio_to_ort("roi_head", alone)  # no start-up target for it
    assert len(alone.targets) == 1


def test_each_mode_has_its_server_and_the_peers_cold_start_uses_their_python(tmp_path: Path) -> None:
    from benchmarks.latency import MODES, PEER_MODES, cold_start_command, server_for

    assert {mode: server_for(mode) for mode in MODES} == {
        "static": "cpp", "static_plain": "cpp", "dynamic": "cpp", "python_eager": "python", "python_lite": "python",
        "onnxruntime": "onnxruntime", "executorch": "executorch"}
    peers = tmp_path / "peers" / "bin" / "python"
    for mode in PEER_MODES:
        command = cold_start_command(tmp_path / "lite_predictor", "mobilenet_v2", tmp_path, mode, 1, peers)
        assert command[:3] == [str(peers), "-m", "benchmarks.cold_start"] and command[command.index("--mode") + 1] == mode
    assert cold_start_command(tmp_path / "lite_predictor", "m", tmp_path, "python_lite", 1, peers)[0] == sys.executable
    assert cold_start_command(tmp_path / "lite_predictor", "m", tmp_path, "static", 1, peers)[:2] == [
        str(tmp_path / "lite_predictor"), str(tmp_path / "m.ptl")]
    plain = cold_start_command(tmp_path / "lite_predictor", "m", tmp_path, "static_plain", 1, peers)
    assert plain[plain.index("--dispatch") + 1] == "static" and "--no-specialize" in plain
    static = cold_start_command(tmp_path / "lite_predictor", "m", tmp_path, "static", 1, peers)
    assert "--no-specialize" not in static


def test_latency_table_has_a_column_per_mode_and_the_ratios_to_onnxruntime() -> None:
    from benchmarks.report import latency_table

    section = Section()
    for mode, ms in (("static", 2.0), ("dynamic", 2.1), ("onnxruntime", 1.0), ("executorch", 1.2)):
        section.add(f"latency/mobilenet_v2/threads_1/{mode}/median_ms", ms, "ms")
    section.add("latency/mobilenet_v2/threads_1/executorch_to_onnxruntime", 1.2, "ratio")
    section.add("latency/mobilenet_v2/threads_1/executorch_to_onnxruntime_ci95", "1.100-1.300", "ratio interval")
    header, _, row = latency_table(section)
    assert "ExecuTorch (ms)" in header and "ExecuTorch / ONNX Runtime, per round (95% interval)" in header
    assert row.endswith("| 1.200 (1.100-1.300) |")


# ------------------------------------------------------------------------- the servers' shared protocol


def _serve(commands: list[str], load) -> list[str]:
    import io

    from benchmarks.latency_protocol import serve

    out = io.StringIO()
    serve([c + "\n" for c in commands], load, "load KEY test MODEL INPUTS, run KEY, quit", out)
    return out.getvalue().splitlines()


def test_serve_replies_load_time_then_run_times_and_stops_at_quit() -> None:
    from benchmarks.latency_protocol import Loaded

    calls: list[tuple[str, Path, Path]] = []

    def load(mode: str, model: Path, inputs: Path) -> Loaded:
        calls.append((mode, model, inputs))
        return Loaded(12.5, lambda: None)

    replies = _serve(["load a test m.ptl m.inputs.pt", "run a", "run a", "quit", "run a"], load)
    assert calls == [("test", Path("m.ptl"), Path("m.inputs.pt"))]
    assert replies[0] == "ok 12.500000"
    assert len(replies) == 3 and all(r.startswith("ok ") for r in replies)


def test_serve_reports_every_failure_as_an_error_line_and_keeps_serving() -> None:
    from benchmarks.latency_protocol import Loaded

    def load(mode: str, model: Path, inputs: Path) -> Loaded:
        if mode != "test":
            raise ValueError(f"unknown mode {mode!r}\nsecond line")
        return Loaded(1.0, lambda: 1 / 0)

    replies = _serve(["load a other m i", "run nothing", "bogus", "load b test m i", "run b"], load)
    assert replies == [
        "error ValueError: unknown mode 'other'",
        "error KeyError: 'nothing'",
        "error ValueError: bad command 'bogus' (load KEY test MODEL INPUTS, run KEY, quit)",
        "ok 1.000000",
        "error ZeroDivisionError: division by zero",
    ]


def test_serve_checks_the_first_run_only_and_drops_a_key_whose_outputs_are_wrong() -> None:
    from benchmarks.latency_protocol import Loaded

    checked: list[object] = []

    def check(outputs: object) -> str | None:
        checked.append(outputs)
        return "output 0 differs" if outputs == "wrong" else None

    models = {"good": Loaded(1.0, lambda: "right", check=check), "bad": Loaded(1.0, lambda: "wrong", check=check)}
    replies = _serve(["load g good m i", "run g", "run g", "load b bad m i", "run b", "run b"],
                     lambda mode, model, inputs: models[mode])
    assert checked == ["right", "wrong"]
    assert [r.split()[0] for r in replies] == ["ok", "ok", "ok", "ok", "error", "error"]
    assert replies[4] == "error OutputMismatch: output 0 differs" and replies[5] == "error KeyError: 'b'"


def _ask_cpp_server(commands: list[str], env: dict[str, str] | None = None) -> list[str]:
    import subprocess

    server = REPO_ROOT / "build" / "benchmarks" / "bench_latency_server"
    assert server.is_file(), f"{server} is missing: ./build.sh test builds it (target bench_latency_server)"
    done = subprocess.run([str(server), "--threads", "1"], input="".join(c + "\n" for c in [*commands, "quit"]),
                          capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_cpp_server_checks_its_first_outputs_and_drops_a_key_whose_outputs_are_wrong(tmp_path: Path) -> None:
    import shutil

    import torch

    models = REPO_ROOT / "build" / "models"
    for name in ("right", "wrong"):
        shutil.copy(models / "arithmetic.ptl", tmp_path / f"{name}.ptl")
    expected = list(torch.load(models / "arithmetic.expected.pt"))
    torch.save(expected, tmp_path / "right.expected.pt")
    torch.save([t + 1 if t.is_floating_point() else t for t in expected], tmp_path / "wrong.expected.pt")
    inputs = models / "arithmetic.inputs.pt"
    replies = _ask_cpp_server([f"load r static {tmp_path / 'right.ptl'} {inputs}", "run r", "run r",
                               f"load w dynamic {tmp_path / 'wrong.ptl'} {inputs}", "run w", "run w"])
    assert [r.split()[0] for r in replies] == ["ok", "ok", "ok", "ok", "error", "error"], replies
    assert replies[4].startswith("error OutputMismatch: "), replies[4]
    assert replies[5] == "error nothing loaded under 'w'"


def test_the_cpp_server_counts_the_stages_sites_and_those_running_compiled_kernels() -> None:
    models = REPO_ROOT / "build" / "models"
    conv = models / "ssdlite_head_convs"  # 12 conv sites the stage compiles (kept untimed: conftest's hook)
    replies = _ask_cpp_server([f"load c static {conv}.ptl {conv}.inputs.pt", "run c", "run c", "run c", "compiled c",
                               f"load n static_plain {conv}.ptl {conv}.inputs.pt", "run n", "compiled n",
                               "compiled nothing"])
    assert [r.split()[0] for r in replies] == ["ok"] * 8 + ["error"], replies
    compiled, ran = (int(word) for word in replies[4].split()[1:])
    assert ran == 12 and compiled == 12, replies[4]
    assert replies[7] == "ok 0 0"  # --no-specialize: no site ran through the stage
    assert replies[8] == "error nothing loaded under 'nothing'"
    # Races on, each lost (test hook): every site ran, none on its compiled kernel.
    from tests.predictor_runner import race_on_environment

    env = {**race_on_environment(), "LIGHTWEIGHT_DISPATCH_TEST_ONLY_GENERATED_WINS": "1"}
    replies = _ask_cpp_server([f"load c static {conv}.ptl {conv}.inputs.pt", *["run c"] * 6, "compiled c"], env)
    assert replies[-1] == "ok 0 12", replies


def test_the_cpp_server_refuses_a_model_without_expected_outputs(tmp_path: Path) -> None:
    import shutil

    models = REPO_ROOT / "build" / "models"
    shutil.copy(models / "arithmetic.ptl", tmp_path / "alone.ptl")
    replies = _ask_cpp_server([f"load a static {tmp_path / 'alone.ptl'} {models / 'arithmetic.inputs.pt'}", "run a"])
    assert replies[0].startswith("error ") and "alone.expected.pt" in replies[0], replies
    assert replies[1] == "error nothing loaded under 'a'"


def test_serve_enters_the_context_around_each_run() -> None:
    import contextlib

    from benchmarks.latency_protocol import Loaded

    events: list[str] = []

    @contextlib.contextmanager
    def context():
        events.append("enter")
        yield
        events.append("exit")

    _serve(["load a test m i", "run a", "run a"],
           lambda mode, model, inputs: Loaded(1.0, lambda: events.append("run"), context=context))
    assert events == ["enter", "run", "exit"] * 2


def test_outputs_match_within_the_tolerance_and_mismatches_say_where() -> None:
    import torch

    from benchmarks.latency_protocol import outputs_mismatch

    expected = [torch.tensor([1.0, 100.0]), torch.tensor([3, 4]), torch.zeros(0, 4)]
    assert outputs_mismatch([torch.tensor([1.00005, 100.01]), torch.tensor([3, 4]), torch.zeros(0, 4)], expected) is None
    assert outputs_mismatch(expected[:2], expected) == "2 output tensor(s), the model's expected outputs have 3"
    assert outputs_mismatch([expected[0], expected[1], torch.zeros(1, 4)], expected) == (
        "output 2 has shape [1, 4], expected [0, 4]")
    problem = outputs_mismatch([torch.tensor([1.0, 100.02]), *expected[1:]], expected)
    assert problem is not None and problem.startswith("output 0 differs beyond 0.0001 + 0.0001 x |expected|")
    assert "at flat index 1" in problem
    assert outputs_mismatch([torch.tensor([1.01, 100.0]), *expected[1:]], expected, atol=0.02) is None


def test_an_error_is_reported_by_its_first_line_and_the_line_naming_its_cause() -> None:
    from benchmarks.latency_protocol import first_line

    error = RuntimeError("Could not guard on data-dependent expression Eq(u0, 0)\n\nconsider ...\n"
                         "Caused by: (test_models/ssdlite_head.py:137 in class_aware_nms)\nmore")
    assert first_line(error) == ("Could not guard on data-dependent expression Eq(u0, 0) "
                                 "Caused by: (test_models/ssdlite_head.py:137 in class_aware_nms)")
    assert first_line(KeyError()) == "KeyError"


def test_an_export_is_made_once_per_model_file_and_exporter(tmp_path: Path) -> None:
    from benchmarks.eager_exports import cached_export

    model = tmp_path / "mobilenet_v2.ptl"
    model.write_bytes(b"model one")
    exports: list[Path] = []

    def export(path: Path) -> None:
        exports.append(path)
        path.write_text("exported")

    first = cached_export(model, tmp_path / "cache", "exporter 1", ".onnx", export)
    assert cached_export(model, tmp_path / "cache", "exporter 1", ".onnx", export) == first
    assert len(exports) == 1 and first.read_text() == "exported" and first.name.startswith("mobilenet_v2-")
    assert cached_export(model, tmp_path / "cache", "exporter 2", ".onnx", export) != first
    model.write_bytes(b"model two")
    assert cached_export(model, tmp_path / "cache", "exporter 1", ".onnx", export) != first
    assert len(exports) == 3


def test_a_failed_export_leaves_nothing_to_reuse(tmp_path: Path) -> None:
    from benchmarks.eager_exports import cached_export

    model = tmp_path / "ssdlite_head.ptl"
    model.write_bytes(b"model")

    def export(path: Path) -> None:
        path.write_text("half")
        raise RuntimeError("torchvision::nms has no mapping")

    with pytest.raises(RuntimeError, match="no mapping"):
        cached_export(model, tmp_path / "cache", "exporter", ".pte", export)
    assert list((tmp_path / "cache").iterdir()) == []


def test_the_bind_time_stage_is_judged_against_plain_static_in_the_same_rounds() -> None:
    from benchmarks.figures import Section
    from benchmarks.latency import Samples, record_ratio_to_plain_static

    samples = Samples(rounds=[{"static": 5.0, "static_plain": 10.0}, {"static": 6.0, "static_plain": 10.0},
                              {"static": 11.0, "static_plain": 10.0}])
    section = Section()
    record_ratio_to_plain_static("mobilenet_v2", 1, samples, section)
    assert section.get("latency/mobilenet_v2/threads_1/static_to_static_plain") == 0.6
    (target,) = section.targets
    assert target.met is True and "static without the bind-time stage" in target.name
    slower = Section()
    record_ratio_to_plain_static("m", 1, Samples(rounds=[{"static": 1.1, "static_plain": 1.0}]), slower)
    assert slower.targets[0].met is False
    missing = Section()
    record_ratio_to_plain_static("m", 1, Samples(rounds=[{"static": 1.0}]), missing)
    assert missing.targets[0].met is None


def test_the_bind_time_table_has_a_row_per_model_and_says_which_sites_keep_their_generated_kernels() -> None:
    from benchmarks.bind_time_alone import record
    from benchmarks.report import bind_time_table

    section = Section()
    sites = [{"fused": ["aten::linear", "aten::relu_"], "specialized_calls": 5},
             {"fused": ["aten::linear"], "specialized_calls": 0}]
    staged = {"median_ms": 0.86, "specialized_sites": sites, "folded_calls": [{}], "first_run_ms": 5.04,
              "background_preparation": {"waited_ms": 15.2}}
    record(section, "roi_head", staged, {"median_ms": 0.89})
    table = bind_time_table(section)
    assert len(table) == 3
    assert table[2] == ("| `roi_head` | 0.860 ms | 0.890 ms | 2 (3 operator calls; 1 keeps its generated kernels) | 1 "
                        "| 5.0 ms | 15 ms |")


def test_layer_profiles_sum_each_runtimes_operators_into_the_same_kinds_of_layer() -> None:
    from benchmarks import layer_profile as lp
    from benchmarks.report import real_models_layers_table

    ours = lp.by_kind({"aten::conv2d": 9.0, "aten::silu_": 0.5, "aten::mul": 0.25, "aten::adaptive_avg_pool2d": 0.25,
                       "aten::flatten": 0.01, "aten::size": 0.02}, lp._OURS)
    ort = lp.by_kind({"Conv": 5.0, "QuickGelu": 1.0, "Mul": 0.5, "GlobalAveragePool": 0.25, "ReorderInput": 0.25,
                      "ReorderOutput": 0.25, "SomethingNew": 0.1}, lp._ORT)
    assert ours["convolution"] == 9.0 and ours["elementwise"] == 0.75 and ours["pooling"] == 0.25
    assert ours["layout"] == 0.01 and ours["other"] == 0.02
    assert ort["convolution"] == 5.0 and ort["elementwise"] == 1.5 and ort["layout"] == 0.5 and ort["other"] == 0.1
    section = Section()
    section.details["layer_profile"] = {"efficientnet_b0": {"static": ours, "onnxruntime": ort}}
    table = real_models_layers_table(section)
    assert table[0].startswith("| model | convolution |") and "attention" not in table[0]
    assert "| `efficientnet_b0` | 9.00 / 5.00 |" in table[2]


def test_a_latency_server_runs_alone_the_others_stopped_meanwhile(tmp_path: Path) -> None:
    from benchmarks.latency import LatencyServer

    echo = tmp_path / "echo_server.py"
    echo.write_text("import sys\nfor line in sys.stdin:\n    if line.startswith('quit'):\n        break\n"
                    "    print('ok 1.0', flush=True)\n")

    def state(server: LatencyServer) -> str:  # /proc/PID/stat's third field: T when stopped
        return Path(f"/proc/{server._process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    first, second = LatencyServer([sys.executable, str(echo)], 1), LatencyServer([sys.executable, str(echo)], 1)
    try:
        assert first.run("a") == 1.0
        assert state(second) == "T" and state(first) != "T"
        assert second.run("b") == 1.0
        assert state(first) == "T" and state(second) != "T"
    finally:
        first.close()
        second.close()
    assert first._process.returncode == 0 and second._process.returncode == 0


def test_ort_int8_uses_7_bit_weights_only_on_a_cpu_without_vnni(tmp_path: Path) -> None:
    from benchmarks.real_models import cpu_has_vnni

    avx2 = tmp_path / "avx2"
    avx2.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    vnni = tmp_path / "vnni"
    vnni.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni\n")
    assert not cpu_has_vnni(avx2)
    assert cpu_has_vnni(vnni)
    assert cpu_has_vnni(tmp_path / "missing")  # nothing to go on: as documented for VNNI machines
