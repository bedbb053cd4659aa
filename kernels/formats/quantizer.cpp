#include "kernels/formats/quantizer.hpp"

#include <iterator>

#include "kernels/formats/numeric_failure.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "kernels/formats/codec.hpp"
#include "kernels/formats/registry.hpp"

namespace qattn {

namespace {
constexpr const char* kGranularityNames[] = {"tensor", "head", "token", "block", "channel", "group", "kvhead", "thread"};

std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// %g: a tiny scale (1e-30) or eps reads as itself, not as std::to_string's 0.000000.
std::string format_g(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// q4_0's grid (QuantSpec::signed_max): d = m / -(max + 1) in fp32, codes from fp32 1/d, d stored in
// the scale format with its sign; an all-zero group keeps the lab's s = 1 and zero codes.
QuantizedTensor quantize_signed_max(const TensorF& x, QuantizedTensor q, const std::vector<float>& signed_m, const Format& f,
                                    const Format& sf) {
  const float top = static_cast<float>(max_finite(f)) + 1.0f;  // 8 for int4: the max's own code is -8
  std::vector<float> inv(signed_m.size());
  q.scales.resize(signed_m.size());
  for (std::size_t i = 0; i < signed_m.size(); ++i) {
    const float d = signed_m[i] / -top;
    const double stored = d == 0 ? 1.0 : round_to(sf, static_cast<double>(d));
    inv[i] = d == 0 ? 0.0f : 1.0f / d;
    // A subnormal max (|m| < 8 x 2^-126 for int4) has no finite reciprocal: x * inf would make NaN codes.
    if (stored == 0 || !std::isfinite(stored) || !std::isfinite(inv[i])) {
      throw NumericFailure("quantize: scale " + format_g(d) + " (group " + std::to_string(i) + ") is not representable in scale format '" +
                           name_of(q.spec.scale_format) + "' with a finite fp32 reciprocal");
    }
    q.scales[i] = static_cast<float>(stored);
  }
  const std::uint32_t mask = (std::uint32_t{1} << f.bits) - 1;
  const int highest = static_cast<int>(2 * top) - 1;  // 15 for int4
  for (int h = 0; h < x.heads; ++h)
    for (int n = 0; n < x.tokens; ++n)
      for (int c = 0; c < x.dim; ++c) {
        const float scaled = x(h, n, c) * inv[q.scale_index(h, n, c)];
        const float biased = scaled + (top + 0.5f);  // two fp32 roundings, as ggml's C computes them
        const int code = std::min(highest, static_cast<int>(biased)) - static_cast<int>(top);
        q.codes[x.index(h, n, c)] = static_cast<std::uint32_t>(code) & mask;  // two's complement, as decode reads it
      }
  return q;
}
}  // namespace

const char* name_of(Granularity g) { return kGranularityNames[static_cast<int>(g)]; }

Granularity parse_granularity(const std::string& name, const std::string& what) {
  std::string known;
  for (std::size_t i = 0; i < std::size(kGranularityNames); ++i) {
    if (name == kGranularityNames[i]) return static_cast<Granularity>(i);
    known += (i ? ", " : "") + std::string(kGranularityNames[i]);
  }
  throw std::invalid_argument(what + ": unknown granularity '" + name + "'; expected one of: " + known);
}

std::optional<SpecProblem> spec_problem(const QuantSpec& s) {
  const Format f = format_of(s.format), sf = format_of(s.scale_format);
  const bool integer = f.kind == Kind::integer, dynamic = s.rule == ScaleRule::dynamic_absmax;
  const auto problem = [](const char* field, std::string why) { return std::optional<SpecProblem>(SpecProblem{field, std::move(why)}); };
  if (s.granularity == Granularity::block && s.block <= 0) return problem("block", "block granularity needs a positive token count");
  if (s.granularity == Granularity::group && s.block <= 0) return problem("block", "group granularity needs a positive element count");
  if (s.granularity == Granularity::thread &&
      (s.block <= 0 || s.block > kMaxThreadTile || s.period <= 0 || s.width <= 0 || s.block % s.period != 0 || s.period % s.width != 0)) {
    return problem("block", "thread granularity needs TILE:PERIOD:WIDTH positive, the tile at most " + std::to_string(kMaxThreadTile) +
                                " tokens, the period dividing the tile and the width dividing the period; got thread:" + std::to_string(s.block) +
                                ":" + std::to_string(s.period) + ":" + std::to_string(s.width));
  }
  if (s.rule == ScaleRule::static_multiplier && !(std::isfinite(s.multiplier) && s.multiplier > 0)) {
    return problem("static", "the static multiplier must be positive and finite, got " + format_g(s.multiplier));
  }
  if (!dynamic && (s.amax_mul || s.signed_max || s.scale_max != 0 || s.scale_eps != 0)) {
    return problem(s.scale_max != 0 ? "max" : s.scale_eps != 0 ? "eps" : "amax",
                   "/amax, /max and /eps shape a scale from the absmax; a static scale (1 / multiplier) takes none of them");
  }
  if (s.half_away && !integer) return problem("round", "round:away rounds integer codes; expected an integer format");
  if (s.signed_max && (!integer || s.divide || s.amax_mul || s.half_away || s.scale_eps != 0 || s.scale_max != 0 || s.codes_fp32)) {
    return problem("amax", "amax:signed (q4_0's grid) needs an integer format with a dynamic scale, without /div, /amax:mul, /round:away, /eps, "
                           "/max or /codes:fp32 (it forms its codes from the fp32 scale already)");
  }
  if (s.signed_max && sf.specials == Specials::e8m0) {
    return problem("amax", "amax:signed keeps the scale's sign; the scale format e8m0 has none (use fp16 or fp32)");
  }
  if (s.scale_max != 0) {
    // Below 1 an integer format's absmax would round to code 0 or 1 and the group would vanish; a
    // float format's largest would sit under its smallest normal, all codes subnormal or zero.
    const double lo = integer ? 1.0 : min_normal(f), hi = max_finite(f);
    if (!(std::isfinite(s.scale_max) && s.scale_max >= lo && s.scale_max <= hi)) {
      return problem("max", "max " + format_g(s.scale_max) + " (the value the absmax maps to); expected " + format_g(lo) + " <= max <= " +
                                format_g(hi) + " (" + name_of(s.format) + ")");
    }
  }
  if (!(s.scale_eps >= 0 && s.scale_eps < 1)) return problem("eps", "eps " + format_g(s.scale_eps) + " added to each scale; expected 0 <= eps < 1");
  if (s.divide && format_of(s.quotient_format).kind == Kind::integer) {
    return problem("div", std::string("the quotient format '") + name_of(s.quotient_format) + "' is an integer format; expected fp32, fp16 or bf16");
  }
  if (s.codes_fp32 && s.divide) {
    return problem("codes", "codes:fp32 multiplies by the fp32 scale's reciprocal; /div divides by the stored scale: give one of them");
  }
  if (s.codes_fp32 && s.scale_format == FormatId::fp32) {
    return problem("codes", "codes:fp32 takes the codes from the fp32 scale before it is rounded to the stored scale format; the scale is "
                            "stored in fp32, so it changes nothing: give /scale:FORMAT (fp16, bf16, e8m0, ...) or drop /codes:fp32");
  }
  if (sf.kind == Kind::integer) {
    return problem("scale_format", std::string("'") + name_of(s.scale_format) + "' is an integer format; scales are stored in a float format (fp32, fp16, bf16, e8m0, e4m3, ...)");
  }
  return std::nullopt;
}

void validate(const QuantSpec& s, int heads, int tokens, int dim) {
  const std::string fmt = name_of(s.format);
  if (heads <= 0 || tokens <= 0 || dim <= 0) {
    throw std::invalid_argument("quantize: tensor shape [" + std::to_string(heads) + ", " + std::to_string(tokens) +
                                ", " + std::to_string(dim) + "] has an empty dimension; expected all positive");
  }
  if (const auto p = spec_problem(s)) throw std::invalid_argument("quant spec (" + fmt + "): " + p->field + ": " + p->why);
  if (s.granularity == Granularity::kvhead && (s.block <= 0 || heads % s.block != 0)) {
    throw std::invalid_argument("quant spec (" + fmt + "): kvhead needs the query heads per KV head (" + std::to_string(s.block) +
                                " given) to divide the " + std::to_string(heads) + " heads; a recipe's emulation sets it from Hq / Hkv");
  }
  if (s.granularity == Granularity::group && dim % s.block != 0) {
    throw std::invalid_argument("quant spec (" + fmt + "): group size " + std::to_string(s.block) + " must divide the head dim " + std::to_string(dim));
  }
}

std::size_t scale_count(const QuantSpec& s, int heads, int tokens, int dim) {
  const std::size_t h = heads, n = tokens, d = dim;
  switch (s.granularity) {
    case Granularity::tensor: return 1;
    case Granularity::head: return h;
    case Granularity::token: return h * n;
    case Granularity::block: return h * ceil_div(n, s.block);
    case Granularity::channel: return h * d;
    case Granularity::group: return h * n * (d / s.block);
    case Granularity::kvhead: return h / static_cast<std::size_t>(s.block);
    case Granularity::thread: return h * ceil_div(n, s.block) * static_cast<std::size_t>(s.period / s.width);
  }
  return 1;
}

std::size_t QuantizedTensor::scale_index(int h, int n, int c) const {
  const std::size_t hh = h, nn = n, cc = c;
  switch (spec.granularity) {
    case Granularity::tensor: return 0;
    case Granularity::head: return hh;
    case Granularity::token: return hh * tokens + nn;
    case Granularity::block: return hh * ceil_div(tokens, spec.block) + nn / spec.block;
    case Granularity::channel: return hh * dim + cc;
    case Granularity::group: return (hh * tokens + nn) * (dim / spec.block) + cc / spec.block;
    case Granularity::kvhead: return hh / static_cast<std::size_t>(spec.block);
    case Granularity::thread: {
      const std::size_t classes = spec.period / spec.width;
      return (hh * ceil_div(tokens, spec.block) + nn / spec.block) * classes + (nn % spec.period) / spec.width;
    }
  }
  return 0;
}

QuantizedTensor quantize(const TensorF& x, const QuantSpec& spec) {
  validate(spec, x.heads, x.tokens, x.dim);
  QuantizedTensor q;
  q.spec = spec;
  q.heads = x.heads;
  q.tokens = x.tokens;
  q.dim = x.dim;
  q.codes.resize(x.size());
  const std::size_t ns = scale_count(spec, x.heads, x.tokens, x.dim);
  const Format f = format_of(spec.format);
  const Format sf = format_of(spec.scale_format);

  std::vector<float> absmax(ns, 0.0f), signed_m(ns, 0.0f);
  if (spec.rule == ScaleRule::dynamic_absmax) {
    for (int h = 0; h < x.heads; ++h)
      for (int n = 0; n < x.tokens; ++n)
        for (int c = 0; c < x.dim; ++c) {
          const std::size_t g = q.scale_index(h, n, c);
          if (std::fabs(x(h, n, c)) > absmax[g]) signed_m[g] = x(h, n, c);  // the first of equal magnitudes
          absmax[g] = std::max(absmax[g], std::fabs(x(h, n, c)));
        }
  }
  if (spec.signed_max) return quantize_signed_max(x, std::move(q), signed_m, f, format_of(spec.scale_format));
  q.scales.resize(ns);
  std::vector<float> inv(ns);
  const double top = spec.scale_max > 0 ? spec.scale_max : max_finite(f);
  for (std::size_t i = 0; i < ns; ++i) {
    double s = spec.rule == ScaleRule::static_multiplier ? 1.0 / spec.multiplier
               : spec.amax_mul ? static_cast<double>(absmax[i] * static_cast<float>(1.0 / top))
                               : static_cast<double>(absmax[i]) / top;
    // An all-zero group keeps s = 1 with or without eps: its codes are zero either way, and eps
    // alone (1e-7) would underflow a narrow scale format into a failure on zero padding.
    if (s == 0 || (spec.rule == ScaleRule::dynamic_absmax && absmax[i] == 0)) s = 1;
    else if (spec.scale_eps > 0) s = static_cast<float>(static_cast<float>(s) + static_cast<float>(spec.scale_eps));
    const double stored = round_to(sf, static_cast<double>(static_cast<float>(s)));
    q.scales[i] = static_cast<float>(stored);
    inv[i] = 1.0f / (spec.codes_fp32 ? static_cast<float>(s) : q.scales[i]);
    // A subnormal fp32 scale has no finite reciprocal: x * inf would make NaN codes.
    if (!(stored > 0) || !std::isfinite(stored) || !std::isfinite(inv[i])) {
      throw NumericFailure("quantize: scale " + format_g(s) + " (group " + std::to_string(i) + ") is not representable in scale format '" +
                           name_of(spec.scale_format) + "' with a finite fp32 reciprocal");
    }
  }
  if (spec.divide) {
    const Format qf = format_of(spec.quotient_format);
    const double mx = max_finite(f);
    for (int h = 0; h < x.heads; ++h)
      for (int n = 0; n < x.tokens; ++n)
        for (int c = 0; c < x.dim; ++c) {
          const float quotient = x(h, n, c) / q.scales[q.scale_index(h, n, c)];
          double y = round_to(qf, quotient);
          if (spec.half_away) y = std::trunc(static_cast<float>(static_cast<float>(y) + (y >= 0 ? 0.5f : -0.5f)));
          q.codes[x.index(h, n, c)] = encode(f, y > mx ? mx : (y < -mx ? -mx : y));
        }
    return q;
  }
  if (spec.half_away) {
    const double mx = max_finite(f);
    for (int h = 0; h < x.heads; ++h)
      for (int n = 0; n < x.tokens; ++n)
        for (int c = 0; c < x.dim; ++c) {
          const float y = x(h, n, c) * inv[q.scale_index(h, n, c)];
          const float t = std::trunc(y + (y >= 0 ? 0.5f : -0.5f));
          q.codes[x.index(h, n, c)] = encode(f, t > mx ? mx : (t < -mx ? -mx : static_cast<double>(t)));
        }
    return q;
  }
  for (int h = 0; h < x.heads; ++h)
    for (int n = 0; n < x.tokens; ++n)
      for (int c = 0; c < x.dim; ++c)
        q.codes[x.index(h, n, c)] = qattn::quantize(f, x(h, n, c), inv[q.scale_index(h, n, c)]);
  return q;
}

TensorF dequantize(const QuantizedTensor& q) {
  TensorF out(q.heads, q.tokens, q.dim);
  const Format f = format_of(q.spec.format);
  for (int h = 0; h < q.heads; ++h)
    for (int n = 0; n < q.tokens; ++n)
      for (int c = 0; c < q.dim; ++c) {
        const std::size_t i = out.index(h, n, c);
        out.data[i] = dequantize(f, q.codes[i], q.scales[q.scale_index(h, n, c)]);
      }
  return out;
}

std::vector<float> code_values(const QuantizedTensor& q) {
  const Format f = format_of(q.spec.format);
  std::vector<float> v(q.codes.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(decode(f, q.codes[i]));
  return v;
}

std::vector<float> token_scales(const QuantizedTensor& q) {
  std::vector<float> s(static_cast<std::size_t>(q.heads) * q.tokens);
  for (int h = 0; h < q.heads; ++h)
    for (int n = 0; n < q.tokens; ++n) s[static_cast<std::size_t>(h) * q.tokens + n] = q.scales[q.scale_index(h, n, 0)];
  return s;
}

std::vector<float> channel_scales(const QuantizedTensor& q) {
  std::vector<float> s(static_cast<std::size_t>(q.heads) * q.dim);
  for (int h = 0; h < q.heads; ++h)
    for (int c = 0; c < q.dim; ++c) s[static_cast<std::size_t>(h) * q.dim + c] = q.scales[q.scale_index(h, 0, c)];
  return s;
}

}  // namespace qattn
