// qattn_sfu_probe OUT_DIR: measures PTX ex2.approx.ftz.f32 and rcp.approx.ftz.f32 on this GPU and
// writes what the emulator's models are built and checked from (sfu_probe.hpp):
//   <op>_table_dev.i8   the op on its base binade (2^23 entries), as int8 ulps from the correctly
//                       rounded value (glibc's double exp2 or division, rounded to fp32)
//   <op>_sweep.txt      the all-inputs tallies: per input binade, ulp deviations and table misses
//   <op>_samples.u32    a fresh random sample of (input, result) bit-pattern pairs
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

#include "kernels/gpu/probes/sfu_probe.hpp"

namespace {

using qattn::gpu::SfuOp;

std::uint32_t bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float correctly_rounded(SfuOp op, float x) {
  return op == SfuOp::ex2_ftz ? static_cast<float>(std::exp2(static_cast<double>(x))) : static_cast<float>(1.0 / static_cast<double>(x));
}

void write_bytes(const std::string& path, const void* data, std::size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  if (!f) throw std::runtime_error("cannot write " + path);
}

std::vector<std::uint32_t> sample_inputs(SfuOp op, std::mt19937_64& rng) {
  std::vector<std::uint32_t> x;
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::uniform_int_distribution<std::uint32_t> mant(0, (1u << 23) - 1);
  if (op == SfuOp::ex2_ftz) {  // what a softmax feeds exp2: mostly in [-30, 0], some tiny, some far
    for (int i = 0; i < 32768; ++i) x.push_back(bits(static_cast<float>(-30.0 + 30.5 * u01(rng))));
    for (int i = 0; i < 16384; ++i) x.push_back(bits(static_cast<float>(-std::exp2(-40.0 + 47.2 * u01(rng)))));
    for (int i = 0; i < 16384; ++i) x.push_back(0x80000000u | (static_cast<std::uint32_t>(u01(rng) * 135) << 23) | mant(rng));
  } else {  // row sums (1 to 2^24) and any normal value of either sign
    for (int i = 0; i < 32768; ++i) x.push_back(bits(static_cast<float>(std::exp2(24.0 * u01(rng)))));
    for (int i = 0; i < 32768; ++i)
      x.push_back((u01(rng) < 0.5 ? 0x80000000u : 0u) | ((1 + static_cast<std::uint32_t>(u01(rng) * 254)) << 23) | mant(rng));
  }
  return x;
}

void probe(SfuOp op, const char* name, const std::string& dir, std::mt19937_64& rng) {
  const qattn::gpu::SfuSweep s = qattn::gpu::sfu_sweep(op);
  std::vector<std::int8_t> dev(s.table.size());
  long long worst = 0;
  for (std::size_t i = 0; i < s.table.size(); ++i) {
    const float x = op == SfuOp::ex2_ftz ? -2.0f + static_cast<float>(i) * 0x1p-23f : 1.0f + static_cast<float>(i) * 0x1p-23f;
    const long long d = static_cast<long long>(s.table[i]) - static_cast<long long>(bits(correctly_rounded(op, x)));
    if (d < -127 || d > 127) throw std::runtime_error(std::string(name) + ": a table entry " + std::to_string(d) + " ulps from the correct value");
    worst = std::max(worst, std::llabs(d));
    dev[i] = static_cast<std::int8_t>(d);
  }
  write_bytes(dir + "/" + name + "_table_dev.i8", dev.data(), dev.size());
  std::ofstream t(dir + "/" + name + "_sweep.txt");
  t << "# " << name << ": all 2^32 inputs; table entries at most " << worst << " ulps from correctly rounded\n";
  t << "# sign biased_exp  dev-3 dev-2 dev-1 dev0 dev+1 dev+2 dev+3 other  miss_floor miss_nearest miss_trunc  nonftz_differs\n";
  for (int sg = 0; sg < 2; ++sg)
    for (int e = 0; e < 256; ++e) {
      std::uint64_t total = 0;
      for (auto c : s.dev[sg][e]) total += c;
      if (!total) continue;
      t << sg << ' ' << e << ' ';
      for (auto c : s.dev[sg][e]) t << ' ' << c;
      t << "  " << s.miss[0][sg][e] << ' ' << s.miss[1][sg][e] << ' ' << s.miss[2][sg][e] << "  " << s.nonftz[sg][e] << '\n';
    }
  const std::vector<std::uint32_t> x = sample_inputs(op, rng);
  const std::vector<std::uint32_t> y = qattn::gpu::sfu_apply(op, x);
  std::vector<std::uint32_t> pairs;
  for (std::size_t i = 0; i < x.size(); ++i) {
    pairs.push_back(x[i]);
    pairs.push_back(y[i]);
  }
  write_bytes(dir + "/" + name + "_samples.u32", pairs.data(), pairs.size() * 4);
  std::printf("%s: table within %lld ulps; sweep and %zu samples written\n", name, worst, x.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: qattn_sfu_probe OUT_DIR\n");
    return 2;
  }
  try {
    std::mt19937_64 rng(20261207);
    probe(SfuOp::ex2_ftz, "ex2_ftz", argv[1], rng);
    probe(SfuOp::rcp_ftz, "rcp_ftz", argv[1], rng);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qattn_sfu_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
