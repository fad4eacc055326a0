# CMake toolchain file: cross-compile for AArch64 Linux with Debian's g++-aarch64-linux-gnu and
# run the results under qemu-user (CTest and try_run go through CMAKE_CROSSCOMPILING_EMULATOR).
#   cmake -S . -B build/aarch64 --toolchain cmake/aarch64-linux-gnu.cmake
# Packages: scripts/install-deps.sh --arm (g++-aarch64-linux-gnu, qemu-user, and through Debian
# multiarch the arm64 builds of libfmt-dev and libxsimd-dev).
#
# Where things come from:
#  - the C library and libstdc++ to link with: the cross toolchain's own target directory
#    /usr/aarch64-linux-gnu (libc6-dev-arm64-cross & co.); at run time, see the emulator below;
#  - other libraries and their CMake configs: Debian multiarch, /usr/lib/aarch64-linux-gnu
#    (packages such as libfmt-dev:arm64); CMake searches lib/<CMAKE_LIBRARY_ARCHITECTURE> there;
#  - headers: the cross g++ searches /usr/include after its own directories, so header-only
#    packages (doctest-dev, which is `Architecture: all` with its config in /usr/lib/cmake, and
#    xsimd's headers) need nothing for arm64. xsimd's CMake config is in an arch-qualified
#    directory, though: without libxsimd-dev:arm64 the amd64 package's config is used (it names
#    only /usr/include and no binaries, so it is the same for every architecture).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(_qkern_cross_triple aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${_qkern_cross_triple}-gcc)
set(CMAKE_CXX_COMPILER ${_qkern_cross_triple}-g++)
set(CMAKE_LIBRARY_ARCHITECTURE ${_qkern_cross_triple})

# Search the cross toolchain's target directory first, then the host's /usr, where multiarch
# puts arm64 libraries under lib/aarch64-linux-gnu (amd64 ones live under lib/x86_64-linux-gnu,
# which CMake does not search for this architecture). Programs are always the host's.
set(CMAKE_FIND_ROOT_PATH /usr/${_qkern_cross_triple})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

if(NOT DEFINED xsimd_DIR AND NOT EXISTS /usr/lib/${_qkern_cross_triple}/cmake/xsimd/xsimdConfig.cmake)
    foreach(_qkern_xsimd_config IN ITEMS /usr/lib/x86_64-linux-gnu/cmake/xsimd /usr/share/cmake/xsimd /usr/lib/cmake/xsimd)
        if(EXISTS ${_qkern_xsimd_config}/xsimdConfig.cmake)
            set(xsimd_DIR ${_qkern_xsimd_config} CACHE PATH "xsimd's CMake config (header-only: any architecture's will do)")
            break()
        endif()
    endforeach()
endif()

# qemu-user, by absolute path: tests/CMakeLists.txt also hands it to qkern_arch_runner, which
# execv()s it without a PATH search. Its root for the programs' dynamic loader and libraries: where
# Debian multiarch arm64 packages are installed (libc6:arm64 comes with libfmt-dev:arm64), the
# real /, whose /lib/ld-linux-aarch64.so.1 and /lib/aarch64-linux-gnu they are; otherwise the
# cross toolchain's /usr/aarch64-linux-gnu (-L). Never -L with multiarch: qemu falls back to the
# real / for what the prefix lacks, so the cross ld.so would load the multiarch libc.so.6, another
# patch release of glibc, and the first pthread_create hangs. qemu-aarch64 emulates its `max` CPU
# (Armv8.x with dotprod) unless given -cpu or QEMU_CPU.
find_program(QKERN_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static DOC "qemu-user for AArch64")
if(QKERN_QEMU_AARCH64)
    if(EXISTS /lib/ld-linux-aarch64.so.1)
        set(CMAKE_CROSSCOMPILING_EMULATOR "${QKERN_QEMU_AARCH64}")
    else()
        set(CMAKE_CROSSCOMPILING_EMULATOR "${QKERN_QEMU_AARCH64};-L;/usr/${_qkern_cross_triple}")
    endif()
endif()
