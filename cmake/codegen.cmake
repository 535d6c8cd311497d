# lightweight_dispatch_generate_kernels(TARGET name OPS_YAML yaml OUTPUT_DIR dir NUM_SHARDS n [ALL_OPS])
#
# Runs tools/gen_unboxing.py as a build step and compiles its output into the static library `name`.
# The step re-runs when the yaml, native_functions.yaml or the generator's sources change; the generator
# rewrites only files whose content changed and Ninja re-checks their timestamps (restat), so an
# unchanged op set recompiles nothing and a one-op change recompiles one shard.
function(lightweight_dispatch_generate_kernels)
  cmake_parse_arguments(ARG "ALL_OPS" "TARGET;OPS_YAML;OUTPUT_DIR;NUM_SHARDS" "" ${ARGN})
  set(_root "${PROJECT_SOURCE_DIR}")
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
    COMMAND "${Python3_EXECUTABLE}" -m tools.gen_unboxing ${_selection}
            --install-dir "${ARG_OUTPUT_DIR}" --num-shards ${ARG_NUM_SHARDS}
            --backends "${_backends}"
    COMMAND "${CMAKE_COMMAND}" -E touch "${_stamp}"
    DEPENDS ${_selection_deps} ${_generator_sources} "${_root}/custom_ops.yaml" "${_root}/quantized_ops.yaml"
            "${TORCHGEN_DIR}/packaged/ATen/native/native_functions.yaml"
            "${TORCHGEN_DIR}/packaged/ATen/native/tags.yaml"
    WORKING_DIRECTORY "${_root}"
    COMMENT "Generating statically dispatched kernels (${ARG_TARGET})"
    VERBATIM)
  add_custom_target(${ARG_TARGET}_codegen DEPENDS "${_stamp}")
  # The conversions every generated shard calls (lite_predictor/unboxing_helpers.h), compiled once for
  # all generated-kernel libraries of the build rather than inlined into every shard.
  if(NOT TARGET lightweight_dispatch_unboxing_helpers)
    add_library(lightweight_dispatch_unboxing_helpers STATIC
      "${_root}/lite_predictor/unboxing_helpers.cpp" "${_root}/lite_predictor/dispatcher_call.cpp")
    target_include_directories(lightweight_dispatch_unboxing_helpers PUBLIC "${_root}")
    target_link_libraries(lightweight_dispatch_unboxing_helpers PUBLIC ${TORCH_LIBRARIES})
    target_compile_options(lightweight_dispatch_unboxing_helpers PRIVATE ${GENERATED_CODE_OPTIMIZATION})
  endif()
  add_library(${ARG_TARGET} STATIC ${_sources})
  set_source_files_properties(${_sources} PROPERTIES COMPILE_OPTIONS ${GENERATED_CODE_OPTIMIZATION})
  add_dependencies(${ARG_TARGET} ${ARG_TARGET}_codegen)
  target_include_directories(${ARG_TARGET} PUBLIC "${_root}")
  # The project's own kernels (custom_ops.yaml), which generated code calls directly.
  target_link_libraries(${ARG_TARGET} PUBLIC lightweight_dispatch_unboxing_helpers torchvision_kernels ${TORCH_LIBRARIES})
endfunction()
