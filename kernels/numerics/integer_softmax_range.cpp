#include <string>

#include "kernels/formats/numeric_failure.hpp"
#include "kernels/numerics/qflash.hpp"

namespace qattn {

// The integer softmaxes stand 1.0 (in log2 or natural units) for the integer I0 ~ 1/s, with s the
// score's unit s_Q s_K softmax_scale (times log2 e for QFlash). Below 2^-30, I0 = 1/s leaves int32
// (and past 2^63 its cast is undefined); above 2^15 the fixed-point reciprocal s 2^16 times an int32
// score leaves int64. Large s (I0 clamped to 1) computes as the kernel would; outside [2^-30, 2^15]
// the integer pipeline has no representation, so the row is refused.
void check_integer_softmax_step(double s, const std::string& softmax) {
  if (s >= 0x1p-30 && s <= 0x1p15) return;
  throw NumericFailure("recipe field 'softmax': the " + softmax + " integer softmax needs the score unit s = s_Q s_K softmax_scale" +
                              (softmax == "qflash" ? " log2(e)" : "") + " in [2^-30, 2^15] (I0 = 1/s, an int32); a row has s = " +
                              std::to_string(s) + "; use softmax=float for this input");
}

}  // namespace qattn
