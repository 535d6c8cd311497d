# Cross-compiling for 64-bit ARM Linux on an x86-64 host with Debian's cross compiler
# (apt install g++-aarch64-linux-gnu), as ./build.sh cross does:
#
#   cmake -G Ninja -S . -B build_aarch64 -DPython3_EXECUTABLE=.venv/bin/python \
#     -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
#     -DLIGHTWEIGHT_DISPATCH_TARGET_TORCH=<a LibTorch for aarch64: the folder holding lib/, include/, share/cmake>
#
# This file only names the compilers and the target's root; the project finds the target's LibTorch itself
# (cmake/target_torch.cmake), so another toolchain file (an Android NDK's, say) works the same way.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

# The compilers' prefix: aarch64-linux-gnu- is Debian's and Ubuntu's.
set(AARCH64_CROSS_PREFIX "aarch64-linux-gnu-" CACHE STRING "Prefix of the aarch64 cross compilers' names")
set(CMAKE_C_COMPILER "${AARCH64_CROSS_PREFIX}gcc")
set(CMAKE_CXX_COMPILER "${AARCH64_CROSS_PREFIX}g++")

# Libraries, headers and packages come from the target's root (the cross toolchain's sysroot, and the target's
# LibTorch, which the project adds); programs (Python, the generator) from the host.
set(CMAKE_FIND_ROOT_PATH "/usr/aarch64-linux-gnu")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
