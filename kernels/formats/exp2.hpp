#pragma once
// The softmax's exp2, one definition for the emulator and the kernels that reproduce it bit for bit.
// A float64 exp2 rounded once to fp32. Host (glibc) and device (CUDA, HIP) disagree only where
// their float64 results differ, by one float64 ulp (each library is within 1 ulp; glibc's exp2 is
// off the correct rounding on well under 1% of arguments), AND an fp32 rounding boundary lies
// between the two (2^-29 of such pairs): about once in 10^11 arguments. A library exp2f does not
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
