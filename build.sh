#!/usr/bin/env bash
# ./build.sh         set up .venv, export the test models and dump their ops, generate and build
#                    lite_predictor into build/, then run MobileNetV2 and print the verdict
# ./build.sh test    the same setup and build, then the test suite (extra arguments go to pytest)
# ./build.sh all-ops build kernels for every native function CPU can reach (build_all/), report
#                    compile time and size: proves the generator's coverage compiles and links
# ./build.sh bench   the same setup and build, then the benchmarks (benchmarks/README.md): writes
#                    build/bench/report.{md,json} and bench.png; extra arguments go to the bench script
# ./build.sh cross   the same setup and codegen, then lite_predictor for aarch64 Linux into build_aarch64/
#                    (fetches torch's aarch64 wheel once; CROSS_TOOLCHAIN_FILE and TARGET_TORCH choose another
#                    toolchain and LibTorch; LIGHTWEIGHT_DISPATCH_REUSE_EXPORTS=1 skips exporting the test models
#                    again, for a run beside another that does: .ci/run)
# ./build.sh test-cross  every test model's aarch64 lite_predictor under qemu-aarch64 against its outputs
# ./build.sh help    this text
set -euo pipefail
cd "$(dirname "$0")"
ROOT="$PWD"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
BUILD_DIR="$ROOT/build"

say() { printf '\n==> %s\n' "$*"; }

setup_venv() {
  if [[ ! -x "$PY" ]]; then
    say "creating $VENV"
    python3 -m venv "$VENV"
  fi
  # Reinstall only when requirements.txt changed since the last install.
  local stamp="$VENV/.requirements.sha256" want
  want="$(sha256sum requirements.txt | cut -d' ' -f1)"
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    say "installing requirements.txt (torch 2.13.0 CPU, pinned)"
    "$PY" -m pip install --quiet --disable-pip-version-check -r requirements.txt
    echo "$want" > "$stamp"
  fi
  export PATH="$VENV/bin:$PATH"
}

dump_ops() {
  say "exporting test models and dumping their operators"
  "$PY" scripts/dump_ops.py
}

build_predictor() {
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    say "configuring $BUILD_DIR (STATIC_DISPATCH_BACKEND=CPU;QuantizedCPU, USE_LIGHTWEIGHT_DISPATCH=ON)"
    cmake -G Ninja -S "$ROOT" -B "$BUILD_DIR" -DPython3_EXECUTABLE="$PY" \
      "-DSTATIC_DISPATCH_BACKEND=CPU;QuantizedCPU" -DUSE_LIGHTWEIGHT_DISPATCH=ON
  fi
  say "building lite_predictor"
  local start=$SECONDS
  cmake --build "$BUILD_DIR"
  echo "build took $((SECONDS - start)) s"
}

CROSS_DIR="$ROOT/build_aarch64"

# A tool the cross build needs, or a message naming the Debian package that has it (and $3, another way).
need_tool() {
  if ! command -v "$1" > /dev/null 2>&1; then
    echo "build.sh: $1 is missing: install it with 'apt-get install $2' (Debian/Ubuntu)${3:+, or $3}" >&2
    exit 2
  fi
}

# Before anything else: the default toolchain's compiler.
check_cross_compiler() {
  if [[ -z "${CROSS_TOOLCHAIN_FILE:-}" ]]; then
    need_tool aarch64-linux-gnu-g++ g++-aarch64-linux-gnu "point CROSS_TOOLCHAIN_FILE at your own toolchain file"
  fi
}

build_cross() {
  local toolchain="${CROSS_TOOLCHAIN_FILE:-$ROOT/cmake/toolchains/aarch64-linux-gnu.cmake}" target_torch
  if [[ -n "${TARGET_TORCH:-}" ]]; then
    target_torch="$TARGET_TORCH"
  else
    say "the target's LibTorch: torch's aarch64 Linux wheel and the CUDA runtime libraries it names"
    target_torch="$("$PY" scripts/fetch_target_torch.py)"
  fi
  echo "target LibTorch: $target_torch"
  if [[ ! -f "$CROSS_DIR/build.ninja" ]]; then
    say "configuring $CROSS_DIR (toolchain $(basename "$toolchain"))"
    cmake -G Ninja -S "$ROOT" -B "$CROSS_DIR" -DPython3_EXECUTABLE="$PY" -DCMAKE_TOOLCHAIN_FILE="$toolchain" \
      -DLIGHTWEIGHT_DISPATCH_TARGET_TORCH="$target_torch" \
      "-DSTATIC_DISPATCH_BACKEND=CPU;QuantizedCPU" -DUSE_LIGHTWEIGHT_DISPATCH=ON
  fi
  say "building lite_predictor for aarch64"
  local start=$SECONDS
  # What runs on the target (test-cross runs both); the host build's C++ test drivers and benchmarks stay out.
  cmake --build "$CROSS_DIR" --target lite_predictor registration_check
  echo "cross build took $((SECONDS - start)) s"
  file "$CROSS_DIR/lite_predictor" 2> /dev/null || true
}

# The tests that build this tree from scratch in folders of their own (a user's SELECTED_MODELS build, an
# all-ops shard) spend minutes compiling on every core; most of the others run on one. The whole
# suite runs as two pytest processes at once, those builds in one: on 2 cores 11m22 against 19m23 in one process
# (721 tests). Moving the consumer apps' builds (test_embedding.py) there too made both processes slower in a
# fresh clone (the rest 947 -> 995 s, the builds 506 -> 808 s): they compete for the same two cores.
# Extra arguments (-x, -k EXPR, ...) go to one pytest process over the whole suite.
BUILDING_TESTS=(tests/test_user_build.py tests/test_cmake_configure.py)

run_tests() {
  if [[ $# -gt 0 ]]; then
    say "running the test suite (pytest $*)"
    "$PY" -m pytest tests benchmarks/test_benchmarks.py "$@"
    return
  fi
  local log="$BUILD_DIR/test_builds.log" builds_pid builds_status=0 rest_status=0
  say "running the test suite: ${BUILDING_TESTS[*]} in a second process (its output follows the rest's)"
  "$PY" -m pytest "${BUILDING_TESTS[@]}" > "$log" 2>&1 &
  builds_pid=$!
  local ignored=()
  for file in "${BUILDING_TESTS[@]}"; do
    ignored+=(--ignore "$file")
  done
  "$PY" -m pytest tests benchmarks/test_benchmarks.py "${ignored[@]}" || rest_status=$?
  wait "$builds_pid" || builds_status=$?
  say "the tests that build from scratch (${BUILDING_TESTS[*]}; $log)"
  cat "$log"
  if [[ $rest_status != 0 || $builds_status != 0 ]]; then
    echo "build.sh test: FAILED (the rest: pytest exit $rest_status; the builds: pytest exit $builds_status)" >&2
    return 1
  fi
  echo "build.sh test: every test passed"
}

run_mobilenet() {
  say "running MobileNetV2 in lite_predictor (static dispatch) against eager PyTorch's outputs"
  if "$BUILD_DIR/lite_predictor" "$BUILD_DIR/models/mobilenet_v2.ptl" --atol 1e-5; then
    echo "MobileNetV2 matched eager PyTorch with static dispatch."
  else
    echo "MobileNetV2 did NOT match: see the report above." >&2
    exit 1
  fi
}

case "${1:-}" in
  "")
    setup_venv
    dump_ops
    build_predictor
    run_mobilenet
    ;;
  test)
    setup_venv
    dump_ops
    build_predictor
    cmake --build "$BUILD_DIR" --target bench_latency_server # benchmarks/test_benchmarks.py talks to it
    shift
    run_tests "$@"
    ;;
  all-ops)
    setup_venv
    ALL_DIR="$ROOT/build_all"
    cmake -G Ninja -S "$ROOT" -B "$ALL_DIR" -DPython3_EXECUTABLE="$PY" -DBUILD_ALL_OPS_KERNELS=ON > /dev/null
    say "building kernels for every native function CPU can reach"
    start=$SECONDS
    cmake --build "$ALL_DIR" --target lite_predictor_all_ops
    echo "all-ops build took $((SECONDS - start)) s"
    "$PY" - "$ALL_DIR" <<'PYEOF'
import json, sys
from pathlib import Path
build = Path(sys.argv[1])
report = json.loads((build / "generated_all_ops" / "codegen_report.json").read_text())
objects = sorted((build / "CMakeFiles" / "all_ops_kernels.dir" / "generated_all_ops").glob("*.o"))
size = sum(o.stat().st_size for o in objects)
print(f"generated {report['generated']} of {report['reachable_cpu']} reachable "
      f"({report['native_functions_total']} native functions); {len(report['unsupported'])} unsupported")
print(f"object code: {size / 1e6:.2f} MB in {len(objects)} objects, {size / report['generated']:.0f} bytes per op")
print(f"lite_predictor_all_ops: {(build / 'lite_predictor_all_ops').stat().st_size / 1e6:.2f} MB")
PYEOF
    ;;
  bench)
    setup_venv
    dump_ops
    build_predictor
    cmake --build "$BUILD_DIR" --target bench_per_op bench_latency_server
    say "running the benchmarks (a few minutes)"
    shift
    "$PY" -m benchmarks.run_benchmarks "$@"
    ;;
  cross)
    check_cross_compiler
    setup_venv
    if [[ "${LIGHTWEIGHT_DISPATCH_REUSE_EXPORTS:-}" != 1 ]]; then
      dump_ops
    fi
    build_cross
    ;;
  test-cross)
    need_tool qemu-aarch64 qemu-user
    setup_venv
    say "running the aarch64 build under qemu-aarch64 (one iteration per test model)"
    shift
    "$PY" scripts/test_cross.py --build "$CROSS_DIR" "$@"
    ;;
  help|-h|--help)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  *)
    echo "build.sh: unknown command '$1' (try ./build.sh help)" >&2
    exit 2
    ;;
esac
