# QATTN_GPU=HIP: CMake's HIP language on the distribution's HIP (Debian 12: HIP 5.2.3 with clang-15,
# packages hipcc libamdhip64-dev rocm-device-libs clang-15 llvm-15; scripts/install-deps.sh installs
# them). Nothing here needs an AMD GPU; on this machine the HIP build is compile only.
#
# Debian spreads ROCm over /usr, which CMake 3.25's HIP support does not expect, so this module builds
# two small folders in the build directory (never in the source tree):
#   hip-toolchain/rocm/lib/cmake/hip-lang -> the distribution's hip-lang package (CMAKE_HIP_COMPILER_ROCM_ROOT)
#   hip-toolchain/bitcode/                -> links to every rocm-device-libs .bc file, plus the
#                                            oclc_isa_version_<N>.bc files the package lacks (gfx1100 in
#                                            5.2), assembled with llvm-as from one constant each.
# Architectures: CMAKE_HIP_ARCHITECTURES (default gfx1030;gfx90a;gfx1100). RDNA (gfx10+) compiles
# wave32 (clang's default for HIP there), CDNA (gfx9) wave64; platform.hpp checks both at compile time.

set(QATTN_HIP_LIBDIR "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}" CACHE PATH
    "Where the distribution installed libamdhip64 and its cmake/ and amdgcn/bitcode/ folders")
set(QATTN_HIP_ROCM_PATH "/usr" CACHE PATH "Passed to clang as --rocm-path (HIP headers under include/hip)")

function(qattn_hip_require what path package)
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "QATTN_GPU=HIP: ${what} not found at ${path}; install the Debian package '${package}' "
                        "(scripts/install-deps.sh installs the HIP packages on Debian 12)")
  endif()
endfunction()

# The compiler: clang-15 itself (CMake rejects the hipcc wrapper; /usr/bin/clang++ is clang-14 on Debian 12).
if(NOT CMAKE_HIP_COMPILER)
  find_program(QATTN_HIP_CLANG NAMES clang++-15)
  if(NOT QATTN_HIP_CLANG)
    message(FATAL_ERROR "QATTN_GPU=HIP: clang++-15 not found; install the Debian package 'clang-15' "
                        "(or set CMAKE_HIP_COMPILER to a clang++ that matches the installed HIP)")
  endif()
  set(CMAKE_HIP_COMPILER "${QATTN_HIP_CLANG}")
endif()
find_program(QATTN_LLVM_AS NAMES llvm-as-15)
find_program(QATTN_LLVM_DIS NAMES llvm-dis-15)
if(NOT QATTN_LLVM_AS OR NOT QATTN_LLVM_DIS)
  message(FATAL_ERROR "QATTN_GPU=HIP: llvm-as-15/llvm-dis-15 not found; install the Debian package 'llvm-15'")
endif()

set(_hip_cmake_dir "${QATTN_HIP_LIBDIR}/cmake")
set(_hip_system_bitcode "${QATTN_HIP_LIBDIR}/amdgcn/bitcode")
qattn_hip_require("the HIP runtime's CMake package (hip-lang)" "${_hip_cmake_dir}/hip-lang/hip-lang-config.cmake" libamdhip64-dev)
qattn_hip_require("the code-object manager's CMake package (amd_comgr)" "${_hip_cmake_dir}/amd_comgr/amd_comgr-config.cmake" libamd-comgr-dev)
qattn_hip_require("the HIP headers" "${QATTN_HIP_ROCM_PATH}/include/hip/hip_runtime.h" libamdhip64-dev)
qattn_hip_require("the ROCm device libraries" "${_hip_system_bitcode}/ocml.bc" rocm-device-libs)

# The ROCm root CMake expects: only lib/cmake/hip-lang is read from it.
set(_hip_gen "${CMAKE_BINARY_DIR}/hip-toolchain")
file(MAKE_DIRECTORY "${_hip_gen}/rocm/lib/cmake")
file(CREATE_LINK "${_hip_cmake_dir}/hip-lang" "${_hip_gen}/rocm/lib/cmake/hip-lang" SYMBOLIC)
set(CMAKE_HIP_COMPILER_ROCM_ROOT "${_hip_gen}/rocm")
# hip-lang looks for amd_comgr, also inside CMake's compiler checks (try_compile projects see the
# environment, not this project's variables).
set(ENV{amd_comgr_DIR} "${_hip_cmake_dir}/amd_comgr")

if(NOT DEFINED CMAKE_HIP_ARCHITECTURES)
  set(CMAKE_HIP_ARCHITECTURES gfx1030 gfx90a gfx1100)
endif()

# The device-library folder: the package's bitcode, plus an ISA-version constant for each requested
# architecture the package predates. gfxXYZ (Z a hex stepping) is version X*1000 + Y*100 + Z. The
# generated module copies the target lines of a shipped one (clang warns on a data-layout mismatch).
set(_hip_bitcode "${_hip_gen}/bitcode")
execute_process(COMMAND "${QATTN_LLVM_DIS}" "${_hip_system_bitcode}/oclc_isa_version_1030.bc" -o -
                OUTPUT_VARIABLE _hip_isa_ll RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0 OR NOT _hip_isa_ll MATCHES "(target datalayout = \"[^\"]*\")")
  message(FATAL_ERROR "QATTN_GPU=HIP: could not read the data layout of ${_hip_system_bitcode}/oclc_isa_version_1030.bc")
endif()
set(_hip_datalayout "${CMAKE_MATCH_1}")
file(MAKE_DIRECTORY "${_hip_bitcode}")
file(GLOB _hip_bc_files "${_hip_system_bitcode}/*.bc")
foreach(_bc IN LISTS _hip_bc_files)
  get_filename_component(_name "${_bc}" NAME)
  file(CREATE_LINK "${_bc}" "${_hip_bitcode}/${_name}" SYMBOLIC)
endforeach()
foreach(_arch IN LISTS CMAKE_HIP_ARCHITECTURES)
  string(REGEX REPLACE ":.*$" "" _arch "${_arch}")  # target-id features (gfx90a:xnack-) share the ISA file
  if(NOT _arch MATCHES "^gfx([0-9]+)([0-9a-f])([0-9a-f])$")
    message(FATAL_ERROR "QATTN_GPU=HIP: cannot read the ISA version of '${_arch}' in CMAKE_HIP_ARCHITECTURES")
  endif()
  set(_bc "${_hip_bitcode}/oclc_isa_version_${CMAKE_MATCH_1}${CMAKE_MATCH_2}${CMAKE_MATCH_3}.bc")
  if(EXISTS "${_bc}")
    continue()
  endif()
  math(EXPR _version "${CMAKE_MATCH_1} * 1000 + 0x${CMAKE_MATCH_2} * 100 + 0x${CMAKE_MATCH_3}")
  set(_ll "${_hip_gen}/oclc_isa_version_${_arch}.ll")
  file(WRITE "${_ll}"
       "${_hip_datalayout}\n"
       "target triple = \"amdgcn-amd-amdhsa\"\n"
       "@__oclc_ISA_version = linkonce_odr protected local_unnamed_addr addrspace(4) constant i32 ${_version}, align 4\n")
  execute_process(COMMAND "${QATTN_LLVM_AS}" "${_ll}" -o "${_bc}" RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "QATTN_GPU=HIP: ${QATTN_LLVM_AS} failed on ${_ll}: ${_err}")
  endif()
  message(STATUS "qattn: generated ${_bc} (ISA version ${_version}; rocm-device-libs lacks it)")
endforeach()

# The HIP version: clang-15 cannot read Debian's share/hip/version, guesses 3.5 and then leaves out
# its HIP wrapper header (__host__, __device__, math functions); --hip-version puts it back. It is
# added only after enable_language: the wrapper includes <cmath>, and inside CMake 3.25's compiler
# checks hip-lang's `-isystem /usr/include` (filtered out of real targets once the checks have found
# the implicit include directories) would break libstdc++'s #include_next <math.h>.
set(_hip_version_file "${QATTN_HIP_ROCM_PATH}/share/hip/version")
qattn_hip_require("the HIP version file" "${_hip_version_file}" libamdhip64-dev)
file(READ "${_hip_version_file}" _hip_version_text)
set(_hip_version "")
foreach(_part MAJOR MINOR PATCH)
  if(NOT _hip_version_text MATCHES "HIP_VERSION_${_part}=([0-9]+)")
    message(FATAL_ERROR "QATTN_GPU=HIP: no HIP_VERSION_${_part} in ${_hip_version_file}")
  endif()
  list(APPEND _hip_version "${CMAKE_MATCH_1}")
endforeach()
list(JOIN _hip_version "." QATTN_HIP_VERSION)

# hip-lang links clang's builtins library, globbing for it beside the compiler (/usr/lib/clang/*), where
# another clang's may come first: name the HIP compiler's own.
execute_process(COMMAND "${CMAKE_HIP_COMPILER}" --rtlib=compiler-rt -print-libgcc-file-name
                OUTPUT_VARIABLE _hip_rt OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0 OR NOT EXISTS "${_hip_rt}")
  message(FATAL_ERROR "QATTN_GPU=HIP: ${CMAKE_HIP_COMPILER} has no compiler-rt builtins library ('${_hip_rt}'); "
                      "install the Debian package 'libclang-common-15-dev'")
endif()
set(CLANGRT_BUILTINS "${_hip_rt}" CACHE FILEPATH "compiler-rt builtins of the HIP compiler (read by hip-lang)" FORCE)

# Before enable_language: the compiler identification already compiles HIP with these.
set(CMAKE_HIP_FLAGS "--rocm-path=${QATTN_HIP_ROCM_PATH} --rocm-device-lib-path=${_hip_bitcode} ${CMAKE_HIP_FLAGS}")
enable_language(HIP)
if(NOT "/usr/include" IN_LIST CMAKE_HIP_IMPLICIT_INCLUDE_DIRECTORIES)
  message(FATAL_ERROR "QATTN_GPU=HIP: CMake did not find clang's implicit include directories "
                      "(CMAKE_HIP_IMPLICIT_INCLUDE_DIRECTORIES='${CMAKE_HIP_IMPLICIT_INCLUDE_DIRECTORIES}')")
endif()
string(APPEND CMAKE_HIP_FLAGS " --hip-version=${QATTN_HIP_VERSION}")
# Executables that link the kernels link as HIP; clang then notes that --offload-arch is unused.
add_link_options($<$<LINK_LANGUAGE:HIP>:-Wno-unused-command-line-argument>)
set(CMAKE_HIP_STANDARD 20)
set(CMAKE_HIP_STANDARD_REQUIRED ON)
set(CMAKE_HIP_EXTENSIONS OFF)
message(STATUS "qattn: HIP ${QATTN_HIP_VERSION} build with ${CMAKE_HIP_COMPILER} (${CMAKE_HIP_COMPILER_VERSION}) for ${CMAKE_HIP_ARCHITECTURES}")
