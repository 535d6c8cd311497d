# `cmake --install build --prefix P`: what an app needs to embed the runtime, as the CMake package
# LightweightDispatch (find_package(LightweightDispatch CONFIG), with P and LibTorch on CMAKE_PREFIX_PATH).
#
#   lib/                                     the runtime and the prebuilt libraries generated kernels call
#   include/lightweight_dispatch/            the public headers, and only they: the API (runtime.h, values.h,
#                                            bind_time_report.h) and what generated code includes (kernel_table.h,
#                                            unboxing_helpers.h, dispatcher_call.h, torchvision_kernels.h)
#   share/lightweight_dispatch/              the generator (tools/, custom_ops.yaml, quantized_ops.yaml) and
#                                            cmake/codegen.cmake, laid out as in the source tree
#   lib/cmake/LightweightDispatch/           the package: lightweight_dispatch::runtime and
#                                            lightweight_dispatch_add_kernels()
include(CMakePackageConfigHelpers)

set(_share_dir "${CMAKE_INSTALL_DATADIR}/lightweight_dispatch")
set(_package_dir "${CMAKE_INSTALL_LIBDIR}/cmake/LightweightDispatch")

install(TARGETS lightweight_dispatch_runtime lightweight_dispatch_kernel_support torchvision_kernels
        EXPORT LightweightDispatchTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(DIRECTORY include/lightweight_dispatch DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" FILES_MATCHING PATTERN "*.h")

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
