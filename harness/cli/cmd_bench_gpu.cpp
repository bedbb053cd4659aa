// `qattn bench gpu`: the mma and wgmma flash kernels (int8 QK + e4m3 PV, fp16, bf16) beside
// PyTorch's SDPA (flash and cuDNN backends, bf16), SageAttention 1.0.6 (Triton, int8 QK + fp16 PV)
// and FlashAttention-3's forward (fa3-fwd 0.0.3: fp8 e4m3 and bf16), all measured by
// scripts/bench_sdpa.py on the same machine, and the decode kernels' bandwidth (the
// bit-faithful reference and the fast path) beside a device copy's, in one run. The mma family is NVIDIA-only, so
// this needs the CUDA build; any other build keeps the subcommand and says how to get it, as
// `qattn run --backend gpu` does.
#include <fmt/core.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/cli/commands.hpp"
#include "harness/io/json_file.hpp"

#if defined(QATTN_WITH_CUDA)
#include <cuda_runtime.h>

#include "kernels/gpu/decode/flash_decode.hpp"
#include "kernels/gpu/decode/flash_decode_fast.hpp"
#include "kernels/gpu/dot4/flash_dot4.hpp"  // device_name()
#include "kernels/gpu/mma/flash_mma.hpp"
#include "kernels/gpu/wgmma/flash_wgmma.hpp"
#endif

namespace qattn::cli {

namespace {

struct Opts {
  int reps = 20;
  std::vector<int> tokens{4096, 16384};
  std::vector<int> dims{128, 64};
  std::string sdpa, out;
  int split_k = 0;  // 0: chosen from the SM count
  int warps = 0;    // 0: the kernel's default tuning
  int decode_threads = 0;  // 0: the decode kernel's default tuning
};

#if defined(QATTN_WITH_CUDA)

// Prefill B=1, H=32 (Hq = Hkv) at each d and N, causal and not; decode B=8, Hq=32, Hkv=8 (GQA 4),
// N=32768, d=128.
constexpr int kBatch = 1, kHeads = 32;
constexpr int kDecodeBatch = 8, kDecodeQHeads = 32, kDecodeKvHeads = 8, kDecodeTokens = 32768, kDecodeDim = 128;
constexpr double kFlashTarget = 1.0;   // int8-QK + e4m3-PV at least as fast as the fastest peer; 16-bit at least FA3 bf16
constexpr double kDecodeTarget = 0.8;  // decode at least 80% of the copy bandwidth

// FLOPs of attention forward: S = QK^T and O = PV, 2 per multiply-add; half of them when causal.
double attention_flops(int b, int h, int n, int d, bool causal) {
  const double f = 4.0 * n * double(n) * d * b * h;
  return causal ? f / 2 : f;
}

// SDPA timings from scripts/bench_sdpa.py, keyed by shape and backend.
struct SdpaRow {
  std::optional<double> ms;
  std::string error;
};
struct Sdpa {
  std::string device, torch_version;
  std::map<std::string, SdpaRow> rows;
};

std::string sdpa_key(int b, int h, int n, int d, bool causal, const std::string& backend) {
  return fmt::format("{}|{}|{}|{}|{}|{}", b, h, n, d, causal ? 1 : 0, backend);
}

Sdpa read_sdpa(const std::string& path) {
  const auto j = read_json_file(path, "SDPA timings (scripts/bench_sdpa.py --out)");
  Sdpa s;
  try {
    s.device = j.value("device", "");
    s.torch_version = j.value("torch_version", "");
    if (!j.contains("rows") || !j["rows"].is_array()) throw std::invalid_argument("rows: expected a list");
    for (const auto& r : j["rows"]) {
      SdpaRow row;
      if (r.contains("ms") && r["ms"].is_number()) row.ms = r["ms"].get<double>();
      if (r.contains("error") && r["error"].is_string()) row.error = r["error"].get<std::string>();
      if (!row.ms && row.error.empty()) row.error = "no time recorded";
      s.rows[sdpa_key(r.at("B").get<int>(), r.at("H").get<int>(), r.at("N").get<int>(), r.at("d").get<int>(),
                      r.at("causal").get<bool>(), r.at("backend").get<std::string>())] = row;
    }
  } catch (const nlohmann::ordered_json::exception& e) {
    throw std::invalid_argument(path + ": not an SDPA timing file from scripts/bench_sdpa.py: " + e.what());
  }
  return s;
}

// Writes a whole file through a temporary and a rename.
void write_atomic(const std::string& file, const std::string& text) {
  const std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) throw std::runtime_error(tmp + ": write failed");
  }
  std::filesystem::rename(tmp, file);
}

// The report, printed line by line as it is measured and kept for --out.
class Report {
 public:
  void line(const std::string& s = "") {
    text_ += s + "\n";
    fmt::print("{}\n", s);
    std::fflush(stdout);
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

std::string command_line(const Opts& o) {
  std::string tokens;
  for (int n : o.tokens) tokens += (tokens.empty() ? "" : ",") + std::to_string(n);
  std::string dims;
  for (int d : o.dims) dims += (dims.empty() ? "" : ",") + std::to_string(d);
  std::string cmd = fmt::format("qattn bench gpu --reps {} --tokens {} --head-dims {} --split-k {}", o.reps, tokens, dims, o.split_k);
  if (o.warps > 0) cmd += fmt::format(" --warps {}", o.warps);
  if (o.decode_threads > 0) cmd += fmt::format(" --decode-threads {}", o.decode_threads);
  if (!o.sdpa.empty()) cmd += " --sdpa " + o.sdpa;
  if (!o.out.empty()) cmd += " --out " + o.out;
  return cmd;
}

int multiprocessors() {
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || n <= 0) return 132;
  return n;
}

// Default split-K: the smallest power of two giving at least 4 thread blocks per SM when one block
// runs one (sequence, kv head, split), so the last wave is nearly full; each split keeps >= 256 keys.
int default_split_k(int sms) {
  int s = 1;
  while (kDecodeBatch * kDecodeKvHeads * s < 4 * sms && kDecodeTokens / (2 * s) >= 256) s *= 2;
  return s;
}

// The decode kernel's V formats, in report order.
constexpr gpu::DecodeV kDecodeFormats[] = {gpu::DecodeV::e4m3, gpu::DecodeV::q8_0, gpu::DecodeV::q4_0};

int run_bench_gpu(Opts& o) {
  const std::string device = gpu::device_name();
  const int sms = multiprocessors();
  const bool split_default = o.split_k <= 0;
  if (split_default) o.split_k = default_split_k(sms);
  std::optional<Sdpa> sdpa;
  if (!o.sdpa.empty()) sdpa = read_sdpa(o.sdpa);
  gpu::MmaTuning tuning;
  if (o.warps > 0) tuning.warps = o.warps;
  gpu::DecodeTuning decode_tuning;
  if (o.decode_threads > 0) decode_tuning.threads = o.decode_threads;

  Report r;
  std::vector<std::string> notes;
  int failures = 0;  // our kernels' errors (an SDPA backend that could not run is a note, not a failure)
  r.line(fmt::format("# qattn bench gpu: {} ({} SMs)", device, sms));
  r.line();
  r.line("command: `" + command_line(o) + "`");
  r.line();
  r.line(fmt::format("Prefill: median of {} launches per kernel on random device-resident inputs (no transfers timed), "
                     "mma tuning {} warps. FLOPs counted as 4*N^2*d*B*H (QK^T and PV, 2 per multiply-add), halved when "
                     "causal; ours in TOPS (int8 and e4m3 operations counted as FLOPs), SDPA and FA3 bf16 in bf16 TFLOP/s, "
                     "FA3 fp8 in e4m3 TOPS (descales of ones).",
                     o.reps, tuning.warps));
  if (sdpa) {
    r.line(fmt::format("SDPA: {} (torch {}, on {}).", o.sdpa, sdpa->torch_version, sdpa->device));
    if (sdpa->device != device) r.line(fmt::format("**Warning: SDPA was measured on '{}', this run is on '{}'.**", sdpa->device, device));
  } else {
    r.line("SDPA: not given (--sdpa FILE from scripts/bench_sdpa.py).");
  }
  r.line();
  r.line("Ours: the mma.sync family (mma) and the wgmma family (wgmma, sm_90a; P V per 64-key tile into fp32, l summing P as "
         "rounded: the lab's default recipe), and the wgmma family with FlashAttention-3's numerics (wgmma into-O: P V "
         "accumulated in the instructions' own registers, acc.pv=h200_e4m3_wgmma, and l summing P before rounding, "
         "denominator=float); \"128 keys\": the same two with key tiles of 128 (tiles.block_k 128; per tile: "
         "acc.pv=h200_e4m3_wgmma_tile128, as SageAttention 2 adds its P V into O). The ratios take the fastest of our int8-QK+e4m3-PV kernels in each row, and the fastest of our "
         "16-bit ones (named in the verdicts); a ratio is the peer's time over ours (above 1: ours is faster).");
  r.line();
  // wgmma bf16 (bf16 QK^T and P V on the same kernel) beside fp16: what fp8 buys over either 16-bit type.
  r.line("| shape (B,H,N,d,causal) | mma int8-QK+e4m3-PV TOPS | mma fp16 TOPS | wgmma int8-QK+e4m3-PV TOPS "
         "| wgmma into-O int8-QK+e4m3-PV TOPS | wgmma 128 keys int8-QK+e4m3-PV TOPS | wgmma into-O 128 keys int8-QK+e4m3-PV TOPS "
         "| wgmma fp16 TOPS "
         "| wgmma bf16 TOPS | SDPA flash TFLOP/s | SDPA cuDNN TFLOP/s | SageAttention 1 TOPS | FA3 fp8 TOPS | FA3 bf16 TFLOP/s "
         "| ours-int8 / FA3 fp8 | ours-16-bit / FA3 bf16 |");
  r.line("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");

  const auto note = [&notes](const std::string& s) {
    notes.push_back(s);
    return fmt::format("n/a [{}]", notes.size());
  };
  // Our kernel's median ms, or the error as a note.
  // fa3: the wgmma family with FlashAttention-3's numerics (P V into O, l before P's rounding);
  // key_tile: the wgmma family's tiles.block_k.
  const auto ours = [&](bool wgmma, gpu::QkType qk, gpu::PvType pv, const char* what, int n, int d, bool causal, std::string& cell,
                        bool fa3 = false, int key_tile = gpu::kMmaKeyTile) {
    try {
      const double ms = wgmma ? gpu::bench_flash_wgmma(qk, pv, fa3 ? gpu::WgmmaPvAcc::into_o : gpu::WgmmaPvAcc::per_tile, !fa3,
                                                       key_tile, kBatch, kHeads, kHeads, n, d, causal, o.reps)
                              : gpu::bench_flash_mma(qk, pv, kBatch, kHeads, kHeads, n, d, causal, o.reps, tuning);
      cell = fmt::format("{:.1f}", attention_flops(kBatch, kHeads, n, d, causal) / (ms * 1e-3) / 1e12);
      return std::optional<double>(ms);
    } catch (const std::exception& e) {
      ++failures;
      cell = note(fmt::format("{} N={} d={} causal={}: {}", what, n, d, causal ? 1 : 0, e.what()));
      return std::optional<double>();
    }
  };
  constexpr int kPeers = 5, kFa3Fp8 = 3, kFa3Bf16 = 4;
  const char* peer_keys[kPeers] = {"flash", "cudnn", "sage1", "fa3_fp8", "fa3_bf16"};
  const char* peer_names[kPeers] = {"SDPA-flash", "SDPA-cuDNN", "SageAttention-1", "FA3-fp8", "FA3-bf16"};
  std::vector<std::string> verdicts;
  for (int d : o.dims)
    for (int n : o.tokens)
      for (bool causal : {false, true}) {
        std::string c_int8, c_fp16, c_w_int8, c_w_int8_o, c_w128, c_w128_o, c_w_fp16, c_w_bf16;
        const auto mma_int8 = ours(false, gpu::QkType::int8, gpu::PvType::e4m3, "mma int8-QK+e4m3-PV", n, d, causal, c_int8);
        const auto mma_fp16 = ours(false, gpu::QkType::fp16, gpu::PvType::fp16, "mma fp16", n, d, causal, c_fp16);
        const auto w_int8 = ours(true, gpu::QkType::int8, gpu::PvType::e4m3, "wgmma int8-QK+e4m3-PV", n, d, causal, c_w_int8);
        const auto w_int8_o = ours(true, gpu::QkType::int8, gpu::PvType::e4m3, "wgmma into-O int8-QK+e4m3-PV", n, d, causal, c_w_int8_o, true);
        const auto w128 = ours(true, gpu::QkType::int8, gpu::PvType::e4m3, "wgmma 128 keys int8-QK+e4m3-PV", n, d, causal, c_w128, false, 128);
        const auto w128_o =
            ours(true, gpu::QkType::int8, gpu::PvType::e4m3, "wgmma into-O 128 keys int8-QK+e4m3-PV", n, d, causal, c_w128_o, true, 128);
        const auto w_fp16 = ours(true, gpu::QkType::fp16, gpu::PvType::fp16, "wgmma fp16", n, d, causal, c_w_fp16);
        const auto w_bf16 = ours(true, gpu::QkType::bf16, gpu::PvType::bf16, "wgmma bf16", n, d, causal, c_w_bf16);
        // The fastest of ours in each class, and its name.
        const auto fastest_of = [](std::initializer_list<std::pair<const std::optional<double>*, const char*>> kernels) {
          std::pair<std::optional<double>, const char*> best{std::nullopt, ""};
          for (const auto& [ms, name] : kernels)
            if (*ms && (!best.first || **ms < *best.first)) best = {**ms, name};
          return best;
        };
        const auto [ms_int8, ours_name] = fastest_of({{&mma_int8, "mma"},
                                                      {&w_int8, "wgmma"},
                                                      {&w_int8_o, "wgmma into-O"},
                                                      {&w128, "wgmma 128 keys"},
                                                      {&w128_o, "wgmma into-O 128 keys"}});
        const auto [ms_16, ours16_name] = fastest_of({{&mma_fp16, "mma fp16"}, {&w_fp16, "wgmma fp16"}, {&w_bf16, "wgmma bf16"}});
        const double flops = attention_flops(kBatch, kHeads, n, d, causal);
        std::string c_peer[kPeers];
        std::optional<double> peer_ms[kPeers], ratio[kPeers];
        for (int i = 0; i < kPeers; ++i) {
          if (!sdpa) {
            c_peer[i] = "-";
            continue;
          }
          const auto it = sdpa->rows.find(sdpa_key(kBatch, kHeads, n, d, causal, peer_keys[i]));
          if (it == sdpa->rows.end()) {
            c_peer[i] = "not in --sdpa file";
          } else if (!it->second.ms) {
            c_peer[i] = note(fmt::format("{} N={} d={} causal={}: {}", peer_names[i], n, d, causal ? 1 : 0, it->second.error));
          } else {
            peer_ms[i] = *it->second.ms;
            c_peer[i] = fmt::format("{:.1f}", flops / (*peer_ms[i] * 1e-3) / 1e12);
            if (ms_int8) ratio[i] = *peer_ms[i] / *ms_int8;
          }
        }
        std::optional<double> ratio16;
        if (peer_ms[kFa3Bf16] && ms_16) ratio16.emplace(*peer_ms[kFa3Bf16] / *ms_16);
        const auto cell = [](const std::optional<double>& x) { return x ? fmt::format("{:.2f}", *x) : std::string("-"); };
        r.line(fmt::format("| {},{},{},{},{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |", kBatch, kHeads, n,
                           d, causal ? "causal" : "full", c_int8, c_fp16, c_w_int8, c_w_int8_o, c_w128, c_w128_o, c_w_fp16, c_w_bf16, c_peer[0], c_peer[1], c_peer[2],
                           c_peer[kFa3Fp8], c_peer[kFa3Bf16], cell(ratio[kFa3Fp8]), cell(ratio16)));
        // The target: at least the fastest peer measured in this row (the smallest ratio).
        int fastest = -1;
        for (int i = 0; i < kPeers; ++i)
          if (ratio[i] && (fastest < 0 || *ratio[i] < *ratio[fastest])) fastest = i;
        if (fastest >= 0)
          verdicts.push_back(fmt::format("N={} d={} {}: {} int8-QK+e4m3-PV / fastest peer ({}) = {:.2f} (target >= {:.1f}: {})", n, d,
                                         causal ? "causal" : "full", ours_name, peer_names[fastest], *ratio[fastest], kFlashTarget,
                                         *ratio[fastest] >= kFlashTarget ? "met" : "NOT met"));
        if (ratio16)
          verdicts.push_back(fmt::format("N={} d={} {}: {} / FA3-bf16 = {:.2f} (target >= {:.1f}: {})", n, d, causal ? "causal" : "full",
                                         ours16_name, *ratio16, kFlashTarget, *ratio16 >= kFlashTarget ? "met" : "NOT met"));
      }
  r.line();
  for (const auto& v : verdicts) r.line("- " + v);
  if (!verdicts.empty()) r.line();

  r.line(fmt::format("Decode: B={}, Hq={}, Hkv={}, N={}, d={}, one query token per sequence, split-K {}{}, {} threads per split "
                     "block; median of {} launches. "
                     "GB/s = (K codes and scales + V codes and scales + Q + output bytes; split-K partials not counted) / time; "
                     "copy = a 2 GiB device-to-device copy in the same run, read + write counted. Rows \"fast\": flash_decode_fast "
                     "(same recipe and bytes; up to 4 warps a split block, each taking whole key tiles).",
                     kDecodeBatch, kDecodeQHeads, kDecodeKvHeads, kDecodeTokens, kDecodeDim, o.split_k,
                     split_default ? fmt::format(" (default: the smallest power of two with B*Hkv*split >= 4 x {} SMs)", sms)
                                   : std::string(),
                     decode_tuning.threads, o.reps));
  r.line();
  r.line(fmt::format("| V format | ms | GB/s | copy GB/s | ratio | target >= {:.2f} | MB read | split blocks (resident per SM) |", kDecodeTarget));
  r.line("|---|---:|---:|---:|---:|---|---:|---:|");
  // Per V format the reference (bit-faithful; its threads are --decode-threads), then the fast path.
  std::vector<std::pair<gpu::DecodeV, bool>> decode_rows;
  for (const gpu::DecodeV v : kDecodeFormats)
    for (const bool fast : {false, true}) decode_rows.emplace_back(v, fast);
  for (const auto& [v, fast] : decode_rows) {
    const std::string name = fmt::format("{}{}", gpu::decode_v_name(v), fast ? " fast" : "");
    try {
      const gpu::DecodeBench b =
          fast ? gpu::bench_flash_decode_fast(v, kDecodeBatch, kDecodeQHeads, kDecodeKvHeads, kDecodeTokens, kDecodeDim, o.split_k, o.reps)
               : gpu::bench_flash_decode(v, kDecodeBatch, kDecodeQHeads, kDecodeKvHeads, kDecodeTokens, kDecodeDim, o.split_k, o.reps,
                                         decode_tuning);
      const double ratio = b.gbytes_per_s / b.copy_gbytes_per_s;
      r.line(fmt::format("| {} | {:.3f} | {:.0f} | {:.0f} | {:.2f} | {} | {:.1f} | {} ({}) |", name, b.ms, b.gbytes_per_s,
                         b.copy_gbytes_per_s, ratio, ratio >= kDecodeTarget ? "met" : "NOT met", b.bytes / 1e6, b.blocks,
                         b.blocks_per_sm));
    } catch (const std::exception& e) {
      ++failures;
      r.line(fmt::format("| {} | {} | - | - | - | - | - | - |", name, note(fmt::format("decode {}: {}", name, e.what()))));
    }
  }
  if (!notes.empty()) {
    r.line();
    for (std::size_t i = 0; i < notes.size(); ++i) r.line(fmt::format("[{}] {}", i + 1, notes[i]));
  }
  if (!o.out.empty()) {
    write_atomic(o.out, r.text());
    fmt::print("bench gpu: wrote {}\n", o.out);
  }
  return failures == 0 ? 0 : 1;
}

#endif

}  // namespace

// `bench gpu`, registered on the `bench` command; returns the subcommand and sets its action.
CLI::App* add_bench_gpu_subcommand(CLI::App& bench, Action& action) {
  auto* cmd = bench.add_subcommand("gpu", "mma flash kernels vs PyTorch SDPA (flash, cuDNN) and SageAttention 1, and decode bandwidth vs a device copy");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--reps", o->reps, "Timed launches per kernel; the median is reported")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "Prefill context lengths N (B=1, H=32, causal and not)")->delimiter(',')->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--head-dims", o->dims, "Prefill head dimensions d")->delimiter(',')->check(CLI::IsMember({64, 128}))->capture_default_str();
  cmd->add_option("--sdpa", o->sdpa, "SDPA timings JSON written by scripts/bench_sdpa.py on this machine")->check(CLI::ExistingFile);
  cmd->add_option("--out", o->out, "Also write the report (markdown) to this file");
  cmd->add_option("--split-k", o->split_k, "Decode key splits (default: fill the SMs; the value used is printed)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--warps", o->warps, "mma kernels: warps per block (default: the kernel's tuning)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--decode-threads", o->decode_threads, "decode kernel: threads per split block (default: its tuning)")->check(CLI::NonNegativeNumber);
  action = [o]() -> int {
#if defined(QATTN_WITH_CUDA)
    return run_bench_gpu(*o);
#else
    throw std::invalid_argument("bench gpu: this qattn was built without the CUDA kernels (the mma family is NVIDIA-only); "
                                "configure with -DQATTN_GPU=CUDA");
#endif
  };
  return cmd;
}

}  // namespace qattn::cli
