#pragma once
// The softmax's exp2, one definition for the emulator and the kernels that reproduce it bit for bit.
// A float64 exp2 (glibc's and CUDA's are within 1 ulp of float64) rounded once to fp32 is the
// correctly rounded fp32 result unless the exact value lies within 2^-29 of an fp32 rounding
// boundary (relative to the fp32 ulp): host and device agree but for about one argument in 10^8.
// fp32 library exp2f does not give that: glibc's is off the correct rounding about once in 250
// arguments (0.502 ulp), the GPUs' by up to 2 ulp.
#include <cmath>

#include "kernels/formats/host_device.hpp"

namespace qattn {

QATTN_HD inline float exp2_rn(float x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return static_cast<float>(::exp2(static_cast<double>(x)));
#else
  return static_cast<float>(std::exp2(static_cast<double>(x)));
#endif
}

}  // namespace qattn
