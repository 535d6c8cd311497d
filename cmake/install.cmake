# `cmake --install build --prefix P`: what an app needs to embed the runtime, as the CMake package
# LightweightDispatch (find_package(LightweightDispatch CONFIG), with P and LibTorch on CMAKE_PREFIX_PATH).
#
#   lib/                                     the runtime and the prebuilt libraries generated kernels call
#   include/lightweight_dispatch/runtime.h   the API; include/lite_predictor/, include/custom_kernels/: the
#                                            headers it and generated code include
#   share/lightweight_dispatch/              the generator (tools/, custom_ops.yaml, quantized_ops.yaml) and
#                                            cmake/codegen.cmake, laid out as in the source tree
#   lib/cmake/LightweightDispatch/           the package: lightweight_dispatch::runtime and
#                                            lightweight_dispatch_add_kernels()
include(CMakePackageConfigHelpers)

set(_share_dir "${CMAKE_INSTALL_DATADIR}/lightweight_dispatch")
set(_package_dir "${CMAKE_INSTALL_LIBDIR}/cmake/LightweightDispatch")

install(TARGETS lightweight_dispatch_runtime lightweight_dispatch_unboxing_helpers torchvision_kernels
        EXPORT LightweightDispatchTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(FILES include/lightweight_dispatch/runtime.h DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/lightweight_dispatch")
install(FILES lite_predictor/kernel_table.h lite_predictor/unboxing_helpers.h lite_predictor/dispatcher_call.h
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/lite_predictor")
install(FILES custom_kernels/torchvision_kernels.h DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/custom_kernels")

file(GLOB _generator_sources "${PROJECT_SOURCE_DIR}/tools/*.py")
install(FILES ${_generator_sources} DESTINATION "${_share_dir}/tools")
install(FILES custom_ops.yaml quantized_ops.yaml DESTINATION "${_share_dir}")
install(FILES cmake/codegen.cmake DESTINATION "${_share_dir}/cmake")

install(EXPORT LightweightDispatchTargets
        NAMESPACE lightweight_dispatch::
        FILE LightweightDispatchTargets.cmake
        DESTINATION "${_package_dir}")
configure_package_config_file(
  cmake/LightweightDispatchConfig.cmake.in "${PROJECT_BINARY_DIR}/LightweightDispatchConfig.cmake"
  INSTALL_DESTINATION "${_package_dir}"
  PATH_VARS _share_dir)
# 0.x: a new minor version may change the API.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/LightweightDispatchConfigVersion.cmake" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/LightweightDispatchConfig.cmake"
              "${PROJECT_BINARY_DIR}/LightweightDispatchConfigVersion.cmake"
        DESTINATION "${_package_dir}")
