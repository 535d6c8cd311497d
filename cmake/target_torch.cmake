# Finding the LibTorch the build links: the generator's own torch for a native build, or, when cross-compiling,
# LIGHTWEIGHT_DISPATCH_TARGET_TORCH, a LibTorch built for the target.
#
#   LIGHTWEIGHT_DISPATCH_TARGET_TORCH  the folder holding the target LibTorch's lib/, include/ and share/cmake/
#                                      (an unpacked wheel's torch/, or a LibTorch built for Android); unset:
#                                      the torch that Python3_EXECUTABLE imports
#
# Sets LIGHTWEIGHT_DISPATCH_TORCH_TARGETS, the targets the runtime and the kernels link. A CPU build links
# LibTorch's CPU libraries only (torch_cpu, c10): a CUDA-flavoured LibTorch (PyTorch's aarch64 Linux wheels
# are) runs without a GPU as long as the CUDA runtime libraries it names can be loaded.
include_guard(GLOBAL)

set(LIGHTWEIGHT_DISPATCH_TARGET_TORCH "" CACHE PATH
    "A LibTorch for the target (folder with lib/, include/, share/cmake/); empty: the generator's torch")

macro(lightweight_dispatch_find_torch)
  if(LIGHTWEIGHT_DISPATCH_TARGET_TORCH)
    _lightweight_dispatch_find_target_torch()
  else()
    list(APPEND CMAKE_PREFIX_PATH "${LIGHTWEIGHT_DISPATCH_TORCH_CMAKE_PREFIX}")
    find_package(Torch REQUIRED)
    # Torch's imported targets (torch, torch_library), without the absolute library paths TORCH_LIBRARIES also
    # holds, so the installed package names LibTorch as the app's own find_package(Torch) defines it.
    set(LIGHTWEIGHT_DISPATCH_TORCH_TARGETS)
    foreach(_lib IN LISTS TORCH_LIBRARIES)
      if(TARGET ${_lib})
        list(APPEND LIGHTWEIGHT_DISPATCH_TORCH_TARGETS ${_lib})
      endif()
    endforeach()
  endif()
endmacro()

macro(_lightweight_dispatch_find_target_torch)
  get_filename_component(_ld_target_torch "${LIGHTWEIGHT_DISPATCH_TARGET_TORCH}" ABSOLUTE)
  set(_ld_torch_config "${_ld_target_torch}/share/cmake/Torch/TorchConfig.cmake")
  if(NOT EXISTS "${_ld_torch_config}")
    message(FATAL_ERROR
      "LIGHTWEIGHT_DISPATCH_TARGET_TORCH=${LIGHTWEIGHT_DISPATCH_TARGET_TORCH} is not a LibTorch: "
      "${_ld_torch_config} does not exist (point it at the folder holding lib/, include/ and share/cmake/)")
  endif()
  # A toolchain file searches the target's root only: the LibTorch is part of it.
  list(APPEND CMAKE_FIND_ROOT_PATH "${_ld_target_torch}")
  # A CUDA-flavoured LibTorch's Caffe2Config looks for a CUDA toolkit, unless torch::cudart exists already (its
  # cuda.cmake returns early then). A CPU build needs no toolkit: stand in an empty target for it.
  file(READ "${_ld_target_torch}/share/cmake/Caffe2/Caffe2Config.cmake" _ld_caffe2_config)
  if(_ld_caffe2_config MATCHES "set\\(CAFFE2_USE_CUDA 1\\)" AND NOT TARGET torch::cudart)
    add_library(torch::cudart INTERFACE IMPORTED)
    set(_ld_cuda_flavoured ON)
  endif()
  find_package(Torch REQUIRED PATHS "${_ld_target_torch}/share/cmake/Torch" NO_DEFAULT_PATH)
  # The CPU libraries, with what the `torch` target carries for its users (headers, the ABI flag).
  add_library(lightweight_dispatch_target_torch INTERFACE)
  get_target_property(_ld_torch_includes torch INTERFACE_INCLUDE_DIRECTORIES)
  get_target_property(_ld_torch_options torch INTERFACE_COMPILE_OPTIONS)
  target_include_directories(lightweight_dispatch_target_torch INTERFACE ${_ld_torch_includes})
  if(_ld_torch_options)
    target_compile_options(lightweight_dispatch_target_torch INTERFACE ${_ld_torch_options})
  endif()
  target_link_libraries(lightweight_dispatch_target_torch INTERFACE torch_cpu c10)
  if(_ld_cuda_flavoured)
    # libtorch_cpu names libcudart and libcupti: the linker must find them to check it, from where the wheels
    # put them (the NVIDIA wheels' nvidia/cu13/lib beside torch/), which the library's own RPATH names too.
    file(GLOB _ld_nvidia_libs LIST_DIRECTORIES true "${_ld_target_torch}/../nvidia/*/lib")
    foreach(_dir IN LISTS _ld_nvidia_libs)
      target_link_options(lightweight_dispatch_target_torch INTERFACE "-Wl,-rpath-link,${_dir}")
    endforeach()
  endif()
  set(LIGHTWEIGHT_DISPATCH_TORCH_TARGETS lightweight_dispatch_target_torch)
endmacro()
