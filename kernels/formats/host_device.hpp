#pragma once
// QATTN_HD marks functions that are compiled for both the host and the GPU. The scalar
// format code carries it so that the emulator and the kernels share one implementation.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define QATTN_HD __host__ __device__
#else
#define QATTN_HD
#endif
