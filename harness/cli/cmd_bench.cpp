// `qattn bench reference`: the float64 reference's speed beside an Eigen float64 GEMM measured in
// the same run, so the ratio is a property of the code, not of the machine.
#include <fmt/core.h>
#include <omp.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "harness/cli/commands.hpp"
#include "reference/attention.hpp"

namespace qattn::cli {

namespace {

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
  return [o, ref]() {
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
    for (int d : o->dims) {
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
