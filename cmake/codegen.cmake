# The codegen build step as CMake functions, for this project and for apps that embed the runtime.
#
# Included by CMakeLists.txt (the source tree, also under add_subdirectory()) and by the installed package's
# LightweightDispatchConfig.cmake. Either way LIGHTWEIGHT_DISPATCH_ROOT is the directory that holds tools/,
# custom_ops.yaml and quantized_ops.yaml: the source tree, or <prefix>/share/lightweight_dispatch, where
# this file is cmake/codegen.cmake as it is here.
#
#   lightweight_dispatch_add_kernels(<target> [MODELS a.ptl dir/ ...] [OPS_YAML <yaml>] [NUM_SHARDS n] [OUTPUT_DIR dir])
#       the static library <target>: statically dispatched kernels for exactly the operators the models call
#       and the yaml lists, with the conversion helpers and the torchvision kernels they call. Link it and
#       lightweight_dispatch::runtime.
#   lightweight_dispatch_select_ops(TARGET name MODELS a.ptl dir/ ... [OPS_YAML yaml] OUTPUT yaml)
#       the build step that writes the models' ops yaml (tools/ops_from_models.py), re-run when a model changes.
#   lightweight_dispatch_generate_kernels(TARGET name {OPS_YAML yaml | ALL_OPS} OUTPUT_DIR dir NUM_SHARDS n)
#       the same, every argument explicit (ALL_OPS: every native function CPU can reach).
#
# Cache options, shared by every kernel library of a build:
#   STATIC_DISPATCH_BACKEND      CPU;QuantizedCPU (default) or CPU
#   GENERATED_CODE_OPTIMIZATION  -Os (default) or -O3, for the generated kernels
# The generator runs under Python3_EXECUTABLE, which must import torch, torchgen and yaml.
include_guard(GLOBAL)

if(NOT DEFINED LIGHTWEIGHT_DISPATCH_ROOT)
  get_filename_component(LIGHTWEIGHT_DISPATCH_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
endif()
# A global property, not only a variable: functions called from a parent of add_subdirectory() read it.
set_property(GLOBAL PROPERTY LIGHTWEIGHT_DISPATCH_ROOT "${LIGHTWEIGHT_DISPATCH_ROOT}")

set(STATIC_DISPATCH_BACKEND "CPU;QuantizedCPU" CACHE STRING
    "Backends the generated kernels dispatch to: CPU, optionally with QuantizedCPU (the default)")
# The generated glue only moves arguments between the stack and a kernel call (the kernels themselves are
# LibTorch's): -Os makes it about a third smaller for ~12 more instructions per op call (benchmarks/README.md).
set(GENERATED_CODE_OPTIMIZATION "-Os" CACHE STRING
    "Optimisation flag for the generated kernels and their conversion helpers (-Os or -O3)")

# Fails the configure unless STATIC_DISPATCH_BACKEND is CPU, optionally with QuantizedCPU.
function(lightweight_dispatch_check_backends)
  set(_supported_backends CPU QuantizedCPU)
  foreach(_backend IN LISTS STATIC_DISPATCH_BACKEND)
    if(NOT _backend IN_LIST _supported_backends)
      message(FATAL_ERROR
        "STATIC_DISPATCH_BACKEND='${STATIC_DISPATCH_BACKEND}': '${_backend}' is not supported. Lightweight dispatch "
        "generates kernels for CPU, optionally with QuantizedCPU: configure with -DSTATIC_DISPATCH_BACKEND=CPU "
        "or -DSTATIC_DISPATCH_BACKEND='CPU;QuantizedCPU'.")
    endif()
  endforeach()
  if(NOT "CPU" IN_LIST STATIC_DISPATCH_BACKEND)
    message(FATAL_ERROR
      "STATIC_DISPATCH_BACKEND='${STATIC_DISPATCH_BACKEND}' must include CPU (e.g. -DSTATIC_DISPATCH_BACKEND='CPU;QuantizedCPU').")
  endif()
endfunction()

# Finds the Python the generator runs under (Python3_EXECUTABLE if set) and checks it imports torch, torchgen
# and yaml. Sets, in the caller's scope, LIGHTWEIGHT_DISPATCH_TORCH_CMAKE_PREFIX (torch.utils.cmake_prefix_path,
# for find_package(Torch)), LIGHTWEIGHT_DISPATCH_TORCH_VERSION and TORCHGEN_DIR.
macro(lightweight_dispatch_find_generator)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c
            "import torch, torchgen, yaml, os; print(torch.utils.cmake_prefix_path); print(os.path.dirname(torchgen.__file__)); print(torch.__version__.split('+')[0])"
    OUTPUT_VARIABLE _ld_generator_facts OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_VARIABLE _ld_generator_error ERROR_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _ld_generator_result)
  if(NOT _ld_generator_result EQUAL 0)
    string(REGEX REPLACE ".*\n" "" _ld_generator_error "${_ld_generator_error}")
    message(FATAL_ERROR
      "lightweight_dispatch: ${Python3_EXECUTABLE} cannot run the kernel generator (${_ld_generator_error}): it needs "
      "a Python with torch (the version the app links) and pyyaml. Point CMake at one with "
      "-DPython3_EXECUTABLE=/path/to/venv/bin/python (in the lightweight_dispatch source tree, ./build.sh sets up .venv).")
  endif()
  string(REPLACE "\n" ";" _ld_generator_facts "${_ld_generator_facts}")
  list(GET _ld_generator_facts 0 LIGHTWEIGHT_DISPATCH_TORCH_CMAKE_PREFIX)
  list(GET _ld_generator_facts 1 TORCHGEN_DIR)
  list(GET _ld_generator_facts 2 LIGHTWEIGHT_DISPATCH_TORCH_VERSION)
  set_property(GLOBAL PROPERTY LIGHTWEIGHT_DISPATCH_PYTHON "${Python3_EXECUTABLE}")
  set_property(GLOBAL PROPERTY LIGHTWEIGHT_DISPATCH_TORCHGEN_DIR "${TORCHGEN_DIR}")
endmacro()

# Fails the configure when the LibTorch found (Torch_VERSION) is not the torch the generator reads
# native_functions.yaml from: generated code would call kernels with other signatures.
function(lightweight_dispatch_check_torch_version)
  if(DEFINED Torch_VERSION AND NOT "${Torch_VERSION}" STREQUAL "" AND
     NOT "${Torch_VERSION}" VERSION_EQUAL "${LIGHTWEIGHT_DISPATCH_TORCH_VERSION}")
    if(LIGHTWEIGHT_DISPATCH_TARGET_TORCH)
      message(FATAL_ERROR
        "lightweight_dispatch: the target's LibTorch (LIGHTWEIGHT_DISPATCH_TARGET_TORCH=${LIGHTWEIGHT_DISPATCH_TARGET_TORCH}) "
        "is torch ${Torch_VERSION}, but the generator reads native_functions.yaml from the host's torch "
        "${LIGHTWEIGHT_DISPATCH_TORCH_VERSION} (${Python3_EXECUTABLE}): generated code would call kernels with other "
        "signatures. Build for the target with a LibTorch of torch ${LIGHTWEIGHT_DISPATCH_TORCH_VERSION}.")
    endif()
    message(FATAL_ERROR
      "lightweight_dispatch: the LibTorch found (${Torch_DIR}) is ${Torch_VERSION}, but the generator's Python "
      "(${Python3_EXECUTABLE}) has torch ${LIGHTWEIGHT_DISPATCH_TORCH_VERSION}. Use the same torch for both: put "
      "that Python's torch.utils.cmake_prefix_path on CMAKE_PREFIX_PATH, or pass -DPython3_EXECUTABLE= a Python "
      "with torch ${Torch_VERSION}.")
  endif()
endfunction()

# lightweight_dispatch_generate_kernels(TARGET name OPS_YAML yaml OUTPUT_DIR dir NUM_SHARDS n [ALL_OPS])
#
# Runs tools/gen_unboxing.py as a build step and compiles its output into the static library `name`.
# The step re-runs when the yaml, native_functions.yaml or the generator's sources change; the generator
# rewrites only files whose content changed and Ninja re-checks their timestamps (restat), so an
# unchanged op set recompiles nothing and a one-op change recompiles one shard.
function(lightweight_dispatch_generate_kernels)
  cmake_parse_arguments(ARG "ALL_OPS" "TARGET;OPS_YAML;OUTPUT_DIR;NUM_SHARDS" "" ${ARGN})
  get_property(_root GLOBAL PROPERTY LIGHTWEIGHT_DISPATCH_ROOT)
  get_property(_python GLOBAL PROPERTY LIGHTWEIGHT_DISPATCH_PYTHON)
  get_property(_torchgen_dir GLOBAL PROPERTY LIGHTWEIGHT_DISPATCH_TORCHGEN_DIR)
  if(NOT _python)
    message(FATAL_ERROR "lightweight_dispatch_generate_kernels: call lightweight_dispatch_find_generator() first")
  endif()
  set(_sources)
  math(EXPR _last "${ARG_NUM_SHARDS} - 1")
  foreach(_i RANGE ${_last})
    list(APPEND _sources "${ARG_OUTPUT_DIR}/UnboxingShard_${_i}.cpp")
  endforeach()
  list(APPEND _sources "${ARG_OUTPUT_DIR}/KernelTable.cpp" "${ARG_OUTPUT_DIR}/CustomOpRegistration.cpp")
  # Globbed at configure time (a new generator module needs a re-configure); CONFIGURE_DEPENDS would
  # make every build re-run CMake.
  file(GLOB _generator_sources "${_root}/tools/*.py")
  if(ARG_ALL_OPS)
    set(_selection --all-ops)
    set(_selection_deps)
  else()
    set(_selection --op-selection-yaml-path "${ARG_OPS_YAML}")
    set(_selection_deps "${ARG_OPS_YAML}")
  endif()
  # CMake's list separator would split the argument: pass CPU,QuantizedCPU.
  string(REPLACE ";" "," _backends "${STATIC_DISPATCH_BACKEND}")
  set(_stamp "${ARG_OUTPUT_DIR}/.generated.stamp")
  add_custom_command(
    OUTPUT "${_stamp}"
    BYPRODUCTS ${_sources} "${ARG_OUTPUT_DIR}/codegen_report.json"
    COMMAND "${_python}" -m tools.gen_unboxing ${_selection}
            --install-dir "${ARG_OUTPUT_DIR}" --num-shards ${ARG_NUM_SHARDS}
            --backends "${_backends}"
    COMMAND "${CMAKE_COMMAND}" -E touch "${_stamp}"
    DEPENDS ${_selection_deps} ${_generator_sources} "${_root}/custom_ops.yaml" "${_root}/quantized_ops.yaml"
            "${_torchgen_dir}/packaged/ATen/native/native_functions.yaml"
            "${_torchgen_dir}/packaged/ATen/native/tags.yaml"
    WORKING_DIRECTORY "${_root}"
    COMMENT "Generating statically dispatched kernels (${ARG_TARGET})"
    VERBATIM)
  add_custom_target(${ARG_TARGET}_codegen DEPENDS "${_stamp}")
  if(TARGET ${ARG_TARGET}_select_ops)  # the yaml is written by lightweight_dispatch_select_ops
    add_dependencies(${ARG_TARGET}_codegen ${ARG_TARGET}_select_ops)
  endif()
  add_library(${ARG_TARGET} STATIC ${_sources})
  set_source_files_properties(${_sources} PROPERTIES COMPILE_OPTIONS ${GENERATED_CODE_OPTIMIZATION})
  add_dependencies(${ARG_TARGET} ${ARG_TARGET}_codegen)
  # The conversions every generated shard calls (lightweight_dispatch/unboxing_helpers.h), compiled once for all
  # kernel libraries of a build rather than inlined into every shard, and the project's own kernels
  # (custom_ops.yaml), which generated code calls directly. Both carry the include directories and LibTorch.
  target_link_libraries(${ARG_TARGET} PUBLIC lightweight_dispatch::kernel_support lightweight_dispatch::torchvision_kernels)
endfunction()

# lightweight_dispatch_model_files(<out_var> <caller> path...)
#
# The model files behind MODELS paths (relative ones from the current source directory): a file itself, a
# directory's *.ptl files. A directory is globbed with CONFIGURE_DEPENDS, so a model added to it re-runs
# CMake. A path that does not exist, or a directory without .ptl files, fails the configure; messages as
# tools/model_ops.py words them.
function(lightweight_dispatch_model_files out_var caller)
  set(_files)
  foreach(_path IN LISTS ARGN)
    get_filename_component(_absolute "${_path}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    if(IS_DIRECTORY "${_absolute}")
      file(GLOB _in_dir LIST_DIRECTORIES false CONFIGURE_DEPENDS "${_absolute}/*.ptl")
      if(NOT _in_dir)
        message(FATAL_ERROR "${caller}: MODELS '${_absolute}': a directory with no .ptl files")
      endif()
      list(APPEND _files ${_in_dir})
    elseif(EXISTS "${_absolute}")
      list(APPEND _files "${_absolute}")
    else()
      message(FATAL_ERROR
        "${caller}: MODELS '${_absolute}': no such file or directory (a .ptl saved with _save_for_lite_interpreter, "
        "or a directory of them)")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _files)
  set(${out_var} ${_files} PARENT_SCOPE)
endfunction()

# lightweight_dispatch_select_ops(TARGET name MODELS path... [OPS_YAML yaml] OUTPUT yaml)
#
# A build step (the target <name>_select_ops) that writes OUTPUT, the ops yaml of the models' operators and
# OPS_YAML's, with tools/ops_from_models.py: the content scripts/dump_ops.py --model-file ... writes. It re-runs
# when a model file, OPS_YAML or the tool changes, and rewrites OUTPUT only when its content changes: with
# Ninja's restat (a BYPRODUCT), an unchanged op set re-runs no codegen. A file the tool cannot read fails the
# build with its message.
function(lightweight_dispatch_select_ops)
  cmake_parse_arguments(ARG "" "TARGET;OPS_YAML;OUTPUT" "MODELS" ${ARGN})
  get_property(_root GLOBAL PROPERTY LIGHTWEIGHT_DISPATCH_ROOT)
  get_property(_python GLOBAL PROPERTY LIGHTWEIGHT_DISPATCH_PYTHON)
  if(NOT _python)
    message(FATAL_ERROR "lightweight_dispatch_select_ops: call lightweight_dispatch_find_generator() first")
  endif()
  if(NOT ARG_MODELS)
    message(FATAL_ERROR "lightweight_dispatch_select_ops(${ARG_TARGET}): MODELS <a.ptl dir/ ...> is empty")
  endif()
  lightweight_dispatch_model_files(_models "${ARG_TARGET}" ${ARG_MODELS})
  set(_arguments)
  foreach(_model IN LISTS _models)
    list(APPEND _arguments --model-file "${_model}")
  endforeach()
  set(_yaml_deps)
  list(LENGTH _models _count)
  set(_sources "${_count} model file(s)")
  if(ARG_OPS_YAML)
    list(APPEND _arguments --ops-yaml "${ARG_OPS_YAML}")
    set(_yaml_deps "${ARG_OPS_YAML}")
    string(APPEND _sources " and ${ARG_OPS_YAML}")
  endif()
  message(STATUS "lightweight_dispatch: ${ARG_TARGET}'s operators: the union of ${_sources}, written at build time to ${ARG_OUTPUT}")
  file(GLOB _tool_sources "${_root}/tools/*.py")
  set(_stamp "${ARG_OUTPUT}.stamp")
  add_custom_command(
    OUTPUT "${_stamp}"
    BYPRODUCTS "${ARG_OUTPUT}"
    COMMAND "${_python}" -m tools.ops_from_models ${_arguments} --output "${ARG_OUTPUT}"
    COMMAND "${CMAKE_COMMAND}" -E touch "${_stamp}"
    DEPENDS ${_models} ${_yaml_deps} ${_tool_sources} "${_root}/custom_ops.yaml" "${_root}/quantized_ops.yaml"
    WORKING_DIRECTORY "${_root}"
    COMMENT "Selecting the operators of ${ARG_TARGET}'s models"
    VERBATIM)
  # A target of its own (`ninja <name>_select_ops` writes just the yaml); lightweight_dispatch_generate_kernels
  # orders its codegen after it, and its codegen step depends on the yaml itself.
  add_custom_target(${ARG_TARGET}_select_ops DEPENDS "${_stamp}")
endfunction()

# lightweight_dispatch_add_kernels(<target> [MODELS path...] [OPS_YAML <yaml>] [NUM_SHARDS n] [OUTPUT_DIR dir])
#
# The static library <target> with statically dispatched kernels for exactly the operators the MODELS call
# (.ptl files and directories of them) and <yaml> lists (the format scripts/dump_ops.py writes); at least one
# of the two. Relative paths are from the current source directory. With MODELS, the union is written at
# build time to <binary dir>/<target>_selected_ops.yaml (lightweight_dispatch_select_ops). Generated into
# OUTPUT_DIR (default: <binary dir>/<target>_generated) in NUM_SHARDS files compiled in parallel (default 4).
function(lightweight_dispatch_add_kernels target)
  cmake_parse_arguments(ARG "" "OPS_YAML;NUM_SHARDS;OUTPUT_DIR" "MODELS" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "lightweight_dispatch_add_kernels(${target}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_OPS_YAML AND NOT ARG_MODELS)
    message(FATAL_ERROR
      "lightweight_dispatch_add_kernels(${target}) needs MODELS <a.ptl dir/ ...> (the models whose operators get "
      "kernels) or OPS_YAML <yaml> (scripts/dump_ops.py --model-file MODEL.ptl --output ops.yaml writes one), or both")
  endif()
  set(_yaml "")
  if(ARG_OPS_YAML)
    get_filename_component(_yaml "${ARG_OPS_YAML}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    if(NOT EXISTS "${_yaml}")
      message(FATAL_ERROR
        "lightweight_dispatch_add_kernels(${target}): OPS_YAML '${_yaml}' does not exist "
        "(scripts/dump_ops.py --model-file MODEL.ptl --output ops.yaml writes one)")
    endif()
  endif()
  if(NOT ARG_NUM_SHARDS)
    set(ARG_NUM_SHARDS 4)
  endif()
  if(NOT ARG_NUM_SHARDS MATCHES "^[1-9][0-9]*$")
    message(FATAL_ERROR "lightweight_dispatch_add_kernels(${target}): NUM_SHARDS '${ARG_NUM_SHARDS}' is not a positive integer")
  endif()
  if(NOT ARG_OUTPUT_DIR)
    set(ARG_OUTPUT_DIR "${CMAKE_CURRENT_BINARY_DIR}/${target}_generated")
  endif()
  if(ARG_MODELS)
    set(_selected "${CMAKE_CURRENT_BINARY_DIR}/${target}_selected_ops.yaml")
    lightweight_dispatch_select_ops(
      TARGET ${target} MODELS ${ARG_MODELS} OPS_YAML "${_yaml}" OUTPUT "${_selected}")
    set(_yaml "${_selected}")
  endif()
  lightweight_dispatch_generate_kernels(
    TARGET ${target} OPS_YAML "${_yaml}" OUTPUT_DIR "${ARG_OUTPUT_DIR}" NUM_SHARDS ${ARG_NUM_SHARDS})
endfunction()
