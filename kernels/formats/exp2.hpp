#pragma once
// The softmax's exp2, one definition for the emulator and the kernels that reproduce it bit for bit.
// A float64 exp2 (glibc's and CUDA's are within 1 ulp of float64) rounded once to fp32 is the
// correctly rounded fp32 result unless the exact value lies within about 2 float64 ulps of an fp32
// rounding boundary: host and device disagree on a few arguments in 10^9. A library exp2f does not
// give that: glibc's is off the correct rounding about once in 250 arguments (0.502 ulp), the GPUs'
// by up to 2 ulp. On the H200 every output of the dot4 family's tests equals the emulator's.
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
