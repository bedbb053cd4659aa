// `qattn bench reference`: the float64 reference's speed beside an Eigen float64 GEMM measured in
// the same run, so the ratio is a property of the code, not of the machine. `qattn bench emulate`:
// the emulator beside it. `qattn bench gpu` is in cmd_bench_gpu.cpp.
#include <fmt/core.h>
#include <omp.h>

#include "reference/eigen.hpp"
#include <algorithm>
#include <cstdio>
#include <chrono>
#include <random>
#include <vector>

#include "harness/cli/commands.hpp"
#include "kernels/emulate/emulator.hpp"
#include "reference/attention.hpp"

namespace qattn::cli {

CLI::App* add_bench_gpu_subcommand(CLI::App& bench, Action& action);  // cmd_bench_gpu.cpp

namespace {

// Progress on stderr (stdout holds the table): which configuration is being timed.
void bench_progress(std::size_t i, std::size_t n, int tokens, int d, int reps) {
  std::fprintf(stderr, "bench: [%zu/%zu] N=%d d=%d, %d repetition(s)\n", i + 1, n, tokens, d, reps);
  std::fflush(stderr);
}

// Each timed stage named on stderr as it starts: a stage at 16k tokens takes minutes on a small machine.
void bench_stage(const char* what) {
  std::fprintf(stderr, "bench:   timing %s\n", what);
  std::fflush(stderr);
}

template <typename F>
double best_seconds(int reps, F&& f) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

Problem random_problem(int tokens, int dim, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Problem p;
  p.q = TensorF(1, tokens, dim);
  p.k = TensorF(1, tokens, dim);
  p.v = TensorF(1, tokens, dim);
  for (auto* t : {&p.q, &p.k, &p.v})
    for (float& x : t->data) x = normal(gen);
  return p;
}

}  // namespace

Action add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks (speed targets are measured here, never in tests)");
  bench->require_subcommand(1);
  auto* ref = bench->add_subcommand("reference", "float64 reference attention vs an Eigen float64 GEMM");
  struct Opts {
    int tokens = 4096;
    std::vector<int> dims{64, 128};
    int reps = 3;
    int gemm_n = 2048;
    int block_q = ReferenceOptions{}.block_q, block_k = ReferenceOptions{}.block_k;
  };
  auto o = std::make_shared<Opts>();
  ref->add_option("--tokens", o->tokens, "Context length N (one head, all rows, not causal)")->check(CLI::PositiveNumber);
  ref->add_option("--head-dims", o->dims, "Head dims d")->delimiter(',');
  ref->add_option("--reps", o->reps, "Repetitions; the best time is reported")->check(CLI::PositiveNumber);
  ref->add_option("--gemm-n", o->gemm_n, "Square GEMM size for the Eigen baseline")->check(CLI::PositiveNumber);
  ref->add_option("--block-q", o->block_q, "Reference query block")->check(CLI::PositiveNumber);
  ref->add_option("--block-k", o->block_k, "Reference key block")->check(CLI::PositiveNumber);
  auto* emu = bench->add_subcommand("emulate", "The emulator beside the float64 reference on the same head, same run");
  auto eo = std::make_shared<Opts>();
  eo->reps = 2;
  emu->add_option("--tokens", eo->tokens, "Context length N (one head, all rows, not causal)")->check(CLI::PositiveNumber);
  emu->add_option("--head-dims", eo->dims, "Head dims d")->delimiter(',');
  emu->add_option("--reps", eo->reps, "Repetitions; the best time is reported")->check(CLI::PositiveNumber);
  auto modes = std::make_shared<bool>(true);
  emu->add_option("--accumulator-modes", *modes, "Also time the PV accumulator-emulation modes (fp32, fp16, mma)")->capture_default_str();
  auto gpu_action = std::make_shared<Action>();
  auto* gpu = add_bench_gpu_subcommand(*bench, *gpu_action);
  auto emulate_action = [eo, modes]() {
    // int8 QK (per token) + e4m3 P (static 448) + e4m3 V (per channel), exact accumulators; then
    // the same recipe with each accumulator-emulation mode on PV, reported, not targeted.
    Recipe r;
    r.q.unit_scale = r.k.unit_scale = r.p.unit_scale = r.v.unit_scale = false;
    r.q.spec.format = r.k.spec.format = FormatId::int8;
    r.q.spec.granularity = r.k.spec.granularity = Granularity::token;
    r.p.spec.format = FormatId::e4m3;
    r.p.spec.rule = ScaleRule::static_multiplier;
    r.p.spec.multiplier = 448;
    r.v.spec.format = FormatId::e4m3;
    r.v.spec.granularity = Granularity::channel;
    r.qk_acc.kind = Accumulator::Kind::exact;
    r.pv_acc.kind = Accumulator::Kind::exact;
    for (std::size_t di = 0; di < eo->dims.size(); ++di) {
      const int d = eo->dims[di];
      bench_progress(di, eo->dims.size(), eo->tokens, d, eo->reps);
      const Problem p = random_problem(eo->tokens, d, 99);
      bench_stage("the float64 reference");
      const double ref_s = best_seconds(eo->reps, [&] { (void)reference_attention(p); });
      bench_stage("the emulator");
      const double emu_s = best_seconds(eo->reps, [&] { (void)emulate(p, r); });
      fmt::print("N={:<6} d={:<4} threads={}  reference {:8.1f} ms  emulator {:8.1f} ms  ratio {:.2f}  "
                 "(int8 QK per token, e4m3 P 448, e4m3 V per channel, exact accumulators)\n",
                 eo->tokens, d, omp_get_max_threads(), ref_s * 1e3, emu_s * 1e3, emu_s / ref_s);
      if (!*modes) continue;
      for (auto [name, kind] : {std::pair{"fp32", Accumulator::Kind::fp32}, std::pair{"fp16", Accumulator::Kind::fp16},
                                std::pair{"mma fp22", Accumulator::Kind::mma}}) {
        Recipe m = r;
        m.pv_acc.kind = kind;
        m.pv_acc.chunk_mantissa_bits = kind == Accumulator::Kind::mma ? 13 : 23;
        m.pv_acc.acc_mantissa_bits = kind == Accumulator::Kind::mma ? 13 : 23;
        m.pv_acc.chunk_rounding = m.pv_acc.add_rounding = Rounding::toward_zero;
        bench_stage((std::string("the emulator, PV accumulator ") + name).c_str());
        const double t = best_seconds(1, [&] { (void)emulate(p, m); });
        fmt::print("    PV accumulator {:<9} {:8.1f} ms  ({:.1f}x the exact mode)\n", name, t * 1e3, t / emu_s);
      }
    }
    return 0;
  };
  return [o, ref, emu, emulate_action, gpu, gpu_action]() {
    if (emu->parsed()) return emulate_action();
    if (gpu->parsed()) return (*gpu_action)();
    if (!ref->parsed()) return 1;
    const int threads = omp_get_max_threads();
    Eigen::setNbThreads(threads);
    using Mat = Eigen::MatrixXd;
    const Mat a = Mat::Random(o->gemm_n, o->gemm_n), b = Mat::Random(o->gemm_n, o->gemm_n);
    Mat c(o->gemm_n, o->gemm_n);
    const double gemm_s = best_seconds(o->reps, [&] { c.noalias() = a * b; });
    const double gemm_gflops = 2.0 * o->gemm_n * double(o->gemm_n) * o->gemm_n / gemm_s / 1e9;
    fmt::print("eigen fp64 gemm    n={:<6} threads={}  {:8.2f} ms  {:7.1f} GFLOP/s\n", o->gemm_n, threads, gemm_s * 1e3,
               gemm_gflops);
    for (std::size_t di = 0; di < o->dims.size(); ++di) {
      const int d = o->dims[di];
      bench_progress(di, o->dims.size(), o->tokens, d, o->reps);
      const Problem p = random_problem(o->tokens, d, 1234);
      ReferenceOptions ro;
      ro.block_q = o->block_q;
      ro.block_k = o->block_k;
      const double s = best_seconds(o->reps, [&] { (void)reference_attention(p, ro); });
      const double flops = 4.0 * double(o->tokens) * o->tokens * d;  // S = QK^T and O = PV, 2 flops per MAC
      const double gflops = flops / s / 1e9;
      fmt::print("reference fp64     N={:<6} d={:<4} threads={}  {:8.2f} ms  {:7.1f} GFLOP/s  ratio to gemm {:.2f}\n",
                 o->tokens, d, threads, s * 1e3, gflops, gflops / gemm_gflops);
    }
    return 0;
  };
}

}  // namespace qattn::cli
