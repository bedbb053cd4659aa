#pragma once
// Eigen, the one way the project includes it. GCC 12's AVX-512 intrinsics (avx512fintrin.h, reached
// through Eigen's packet math under -march=native) raise a false -Wmaybe-uninitialized on their own
// `_mm512_undefined_*` temporaries, thousands of lines per build.
// The diagnostic is silenced for the third-party headers only; the project's own code keeps it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // first inside the silenced region, so the intrinsics' lines carry it
#endif
#include <Eigen/Dense>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
