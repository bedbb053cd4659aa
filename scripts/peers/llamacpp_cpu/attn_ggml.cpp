// attn_ggml: runs ggml's CPU flash attention the way llama.cpp drives it, on raw float32 Q/K/V.
//
// K and V are written into a KV cache of type q8_0, q4_0 or f16 by ggml_set_rows in the graph (so
// ggml's own CPU quantizer runs, as llama.cpp's cpy_k/cpy_v do), then ggml_flash_attn_ext reads
// views of that cache: Q permuted to [d, tokens, heads], an f16 mask of 0 / -INF over n_kv cells,
// the softmax scale, max_bias 0, softcap 0, precision F32 (as llama.cpp sets it; on the CPU the
// default precision takes the same branch). n_kv is padded as llama.cpp's KV cache pads it: to a
// multiple of 256 cells, at least 256, at most the cache size (the cache holds pad(N, 256) cells).
//
// Prefill: the tokens go in ubatches of --ubatch tokens (llama.cpp's n_ubatch, default 512); each
// ubatch writes its K/V rows into the cache, then attends to the cache. Causal or not (not causal:
// one ubatch of all N tokens). Decode (--decode-rows): the whole K/V is written into the cache, then
// each listed row i runs alone (one query token) against keys 0..i.
//
// Inputs: raw float32 files, Q [Hq, N, d], K and V [Hkv, N, d] (row-major). Output: raw float32
// [Hq, R, d] with R = N (prefill) or the number of decode rows.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

struct Args {
  std::string q_path, k_path, v_path, out_path, type = "q8_0";
  int hq = 0, hkv = 0, n = 0, d = 0, threads = 2, ubatch = 512, pad = 256;
  float scale = 0;
  bool causal = true;
  std::vector<int> decode_rows;  // empty: prefill
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "attn_ggml: %s\n"
               "usage: attn_ggml --q Q.f32 --k K.f32 --v V.f32 --out O.f32 --hq HQ --hkv HKV --n N --d D\n"
               "                 --scale S [--type q8_0|q4_0|f16] [--causal 0|1] [--threads T]\n"
               "                 [--ubatch U] [--pad P] [--decode-rows i,j,...]\n",
               why.c_str());
  std::exit(2);
}

int to_int(const std::string& flag, const std::string& s) {
  try {
    std::size_t used = 0;
    const long v = std::stol(s, &used);
    if (used != s.size()) throw std::invalid_argument(s);
    return static_cast<int>(v);
  } catch (const std::exception&) {
    usage(flag + " expects an integer, got '" + s + "'");
  }
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) usage(f + " needs a value");
    const std::string v = argv[++i];
    if (f == "--q") a.q_path = v;
    else if (f == "--k") a.k_path = v;
    else if (f == "--v") a.v_path = v;
    else if (f == "--out") a.out_path = v;
    else if (f == "--type") a.type = v;
    else if (f == "--hq") a.hq = to_int(f, v);
    else if (f == "--hkv") a.hkv = to_int(f, v);
    else if (f == "--n") a.n = to_int(f, v);
    else if (f == "--d") a.d = to_int(f, v);
    else if (f == "--threads") a.threads = to_int(f, v);
    else if (f == "--ubatch") a.ubatch = to_int(f, v);
    else if (f == "--pad") a.pad = to_int(f, v);
    else if (f == "--causal") a.causal = to_int(f, v) != 0;
    else if (f == "--scale") a.scale = std::stof(v);
    else if (f == "--decode-rows") {
      std::size_t start = 0;
      while (start <= v.size()) {
        const std::size_t comma = v.find(',', start);
        const std::string item = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!item.empty()) a.decode_rows.push_back(to_int(f, item));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else usage("unknown option " + f);
  }
  if (a.q_path.empty() || a.k_path.empty() || a.v_path.empty() || a.out_path.empty()) usage("--q, --k, --v and --out are required");
  if (a.hq <= 0 || a.hkv <= 0 || a.n <= 0 || a.d <= 0) usage("--hq, --hkv, --n and --d must be positive");
  if (a.hq % a.hkv != 0) usage("--hq must be a multiple of --hkv");
  if (a.d % 32 != 0) usage("--d must be a multiple of 32 (q8_0 / q4_0 blocks)");
  if (!(a.scale > 0)) usage("--scale must be positive");
  if (a.threads <= 0 || a.ubatch <= 0 || a.pad <= 0) usage("--threads, --ubatch and --pad must be positive");
  for (int r : a.decode_rows)
    if (r < 0 || r >= a.n) usage("decode row " + std::to_string(r) + " is outside [0, " + std::to_string(a.n) + ")");
  return a;
}

std::vector<float> read_f32(const std::string& path, std::size_t count) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<float> x(count);
  const std::size_t got = std::fread(x.data(), sizeof(float), count, f);
  const bool extra = std::fgetc(f) != EOF;
  std::fclose(f);
  if (got != count || extra)
    throw std::runtime_error(path + ": expected exactly " + std::to_string(count) + " float32 values (" +
                             std::to_string(count * 4) + " bytes)");
  return x;
}

void write_f32(const std::string& path, const std::vector<float>& x) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(x.data(), sizeof(float), x.size(), f) != x.size()) throw std::runtime_error("cannot write " + path);
  std::fclose(f);
}

ggml_type cache_type(const std::string& name) {
  if (name == "q8_0") return GGML_TYPE_Q8_0;
  if (name == "q4_0") return GGML_TYPE_Q4_0;
  if (name == "f16") return GGML_TYPE_F16;
  usage("--type must be q8_0, q4_0 or f16, got '" + name + "'");
}

int round_up(int x, int m) { return (x + m - 1) / m * m; }

// A ggml context with its own memory; freed on scope exit.
struct Context {
  ggml_context* ctx;
  explicit Context(std::size_t bytes) {
    ggml_init_params p = {bytes, nullptr, false};
    ctx = ggml_init(p);
    if (!ctx) throw std::runtime_error("ggml_init failed for " + std::to_string(bytes) + " bytes");
  }
  ~Context() { ggml_free(ctx); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
};

// The problem's tensors, the KV cache, and the graphs that fill and read it.
class Runner {
 public:
  Runner(const Args& a, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v)
      : a_(a), q_(q), k_(k), v_(v), type_(cache_type(a.type)), kv_size_(round_up(a.n, a.pad)),
        cache_(2 * ggml_row_size(type_, static_cast<int64_t>(a.d) * a.hkv) * kv_size_ + 4 * ggml_tensor_overhead() + 1024) {
    k_cache_ = ggml_new_tensor_2d(cache_.ctx, type_, static_cast<int64_t>(a.d) * a.hkv, kv_size_);
    v_cache_ = ggml_new_tensor_2d(cache_.ctx, type_, static_cast<int64_t>(a.d) * a.hkv, kv_size_);
    std::memset(k_cache_->data, 0, ggml_nbytes(k_cache_));  // llama.cpp clears its cache buffers
    std::memset(v_cache_->data, 0, ggml_nbytes(v_cache_));
  }

  // Prefill: ubatches of tokens, each writing its K/V rows then attending. Output [Hq, N, d].
  std::vector<float> prefill() {
    std::vector<float> out(static_cast<std::size_t>(a_.hq) * a_.n * a_.d);
    const int ub = a_.causal ? a_.ubatch : a_.n;
    for (int t0 = 0; t0 < a_.n; t0 += ub) {
      const int t1 = std::min(a_.n, t0 + ub);
      std::vector<int> rows;
      for (int t = t0; t < t1; ++t) rows.push_back(t);
      run(rows, /*write_kv=*/true, t1, out, t0);
    }
    return out;
  }

  // Decode: all K/V rows written first, then each row alone against keys 0..i. Output [Hq, R, d].
  std::vector<float> decode(const std::vector<int>& rows) {
    write_all_kv();
    const int r = static_cast<int>(rows.size());
    std::vector<float> out(static_cast<std::size_t>(a_.hq) * r * a_.d), one(static_cast<std::size_t>(a_.hq) * a_.d);
    for (int u = 0; u < r; ++u) {
      run({rows[u]}, /*write_kv=*/false, rows[u] + 1, one, 0, /*rows_total=*/1);
      for (int h = 0; h < a_.hq; ++h)
        std::memcpy(&out[(static_cast<std::size_t>(h) * r + u) * a_.d], &one[static_cast<std::size_t>(h) * a_.d], a_.d * sizeof(float));
    }
    return out;
  }

 private:
  // llama.cpp's n_kv: the used cells rounded up to the padding, at least one padding, at most the cache.
  int n_kv_for(int used) const { return std::min(kv_size_, std::max(a_.pad, round_up(used, a_.pad))); }

  // Token-major rows of x [H, N, d] for tokens `rows`: [rows][H][d], as a projection's output is laid out.
  void gather(const std::vector<float>& x, int heads, const std::vector<int>& rows, float* dst) const {
    for (std::size_t u = 0; u < rows.size(); ++u)
      for (int h = 0; h < heads; ++h)
        std::memcpy(dst + (u * heads + h) * a_.d, &x[(static_cast<std::size_t>(h) * a_.n + rows[u]) * a_.d], a_.d * sizeof(float));
  }

  // ggml_set_rows of tokens `rows` into both caches (ggml's from_float for the cache type runs).
  void add_kv_writes(ggml_context* ctx, ggml_cgraph* gf, const std::vector<int>& rows) {
    const int64_t nt = static_cast<int64_t>(rows.size()), width = static_cast<int64_t>(a_.d) * a_.hkv;
    ggml_tensor* idx = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, nt);
    for (int64_t u = 0; u < nt; ++u) static_cast<int64_t*>(idx->data)[u] = rows[u];
    ggml_tensor* kc = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, width, nt);
    ggml_tensor* vc = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, width, nt);
    gather(k_, a_.hkv, rows, static_cast<float*>(kc->data));
    gather(v_, a_.hkv, rows, static_cast<float*>(vc->data));
    ggml_build_forward_expand(gf, ggml_set_rows(ctx, k_cache_, kc, idx));
    ggml_build_forward_expand(gf, ggml_set_rows(ctx, v_cache_, vc, idx));
  }

  void compute(ggml_context* ctx, ggml_cgraph* gf) const {
    if (ggml_graph_compute_with_ctx(ctx, gf, a_.threads) != GGML_STATUS_SUCCESS) throw std::runtime_error("ggml_graph_compute_with_ctx failed");
  }

  void write_all_kv() {
    std::vector<int> rows;
    for (int t = 0; t < a_.n; ++t) rows.push_back(t);
    Context c(work_bytes(a_.n, 0));
    ggml_cgraph* gf = ggml_new_graph(c.ctx);
    add_kv_writes(c.ctx, gf, rows);
    compute(c.ctx, gf);
  }

  std::size_t work_bytes(int tokens, int n_kv) const {
    const std::size_t f = sizeof(float), qh = a_.hq, kh = a_.hkv, d = a_.d;
    const std::size_t tensors = tokens * (qh + 2 * kh + qh) * d * f + static_cast<std::size_t>(n_kv) * tokens * 2 + tokens * 8;
    const std::size_t fa_work = (64 * d + 2 * 64 * 64 + 3 * 64 * d + 64) * f * a_.threads + (qh * (d + 2)) * f * a_.threads * 2;
    return tensors + fa_work + static_cast<std::size_t>(16) * 1024 * 1024 + 64 * ggml_tensor_overhead() + ggml_graph_overhead();
  }

  // One graph: (optionally) the K/V writes of `rows`, then flash attention of those query rows
  // against the cache's first n_kv cells. Query row i sees keys 0..i (causal) or 0..N-1.
  void run(const std::vector<int>& rows, bool write_kv, int used, std::vector<float>& out, int row0, int rows_total = -1) {
    const int nt = static_cast<int>(rows.size()), n_kv = n_kv_for(used), d = a_.d;
    const std::size_t k_row = ggml_row_size(type_, d), kv_row = ggml_row_size(type_, static_cast<int64_t>(d) * a_.hkv);
    Context c(work_bytes(nt, n_kv));
    ggml_cgraph* gf = ggml_new_graph(c.ctx);
    if (write_kv) add_kv_writes(c.ctx, gf, rows);

    ggml_tensor* q = ggml_new_tensor_3d(c.ctx, GGML_TYPE_F32, d, a_.hq, nt);  // [d, heads, tokens], as Qcur
    gather(q_, a_.hq, rows, static_cast<float*>(q->data));
    ggml_tensor* qp = ggml_permute(c.ctx, q, 0, 2, 1, 3);  // [d, tokens, heads]

    // Views of the cache as llama.cpp's get_k / get_v take them: [d, heads, n_kv] permuted to [d, n_kv, heads].
    ggml_tensor* kv = ggml_permute(c.ctx, ggml_view_3d(c.ctx, k_cache_, d, a_.hkv, n_kv, k_row, kv_row, 0), 0, 2, 1, 3);
    ggml_tensor* vv = ggml_permute(c.ctx, ggml_view_3d(c.ctx, v_cache_, d, a_.hkv, n_kv, k_row, kv_row, 0), 0, 2, 1, 3);

    ggml_tensor* mask = ggml_new_tensor_2d(c.ctx, GGML_TYPE_F16, n_kv, nt);
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f), neg_inf = ggml_fp32_to_fp16(-INFINITY);
    for (int u = 0; u < nt; ++u) {
      const int last = a_.causal || !a_.decode_rows.empty() ? rows[u] : a_.n - 1;  // last visible key
      ggml_fp16_t* m = static_cast<ggml_fp16_t*>(mask->data) + static_cast<std::size_t>(u) * n_kv;
      for (int j = 0; j < n_kv; ++j) m[j] = j <= last ? zero : neg_inf;
    }

    ggml_tensor* o = ggml_flash_attn_ext(c.ctx, qp, kv, vv, mask, a_.scale, 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(o, GGML_PREC_F32);
    ggml_build_forward_expand(gf, o);  // after the cache writes: graph nodes run in order
    compute(c.ctx, gf);

    // o is [d, heads, tokens] float32.
    const int total = rows_total > 0 ? rows_total : a_.n;
    const float* src = static_cast<const float*>(o->data);
    for (int u = 0; u < nt; ++u)
      for (int h = 0; h < a_.hq; ++h)
        std::memcpy(&out[(static_cast<std::size_t>(h) * total + row0 + u) * d], src + (static_cast<std::size_t>(u) * a_.hq + h) * d, d * sizeof(float));
  }

  const Args& a_;
  const std::vector<float>& q_;
  const std::vector<float>& k_;
  const std::vector<float>& v_;
  ggml_type type_;
  int kv_size_;
  Context cache_;
  ggml_tensor* k_cache_ = nullptr;
  ggml_tensor* v_cache_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    const std::size_t nq = static_cast<std::size_t>(a.hq) * a.n * a.d, nk = static_cast<std::size_t>(a.hkv) * a.n * a.d;
    const std::vector<float> q = read_f32(a.q_path, nq), k = read_f32(a.k_path, nk), v = read_f32(a.v_path, nk);
    ggml_cpu_init();
    Runner runner(a, q, k, v);
    write_f32(a.out_path, a.decode_rows.empty() ? runner.prefill() : runner.decode(a.decode_rows));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attn_ggml: %s\n", e.what());
    return 1;
  }
  return 0;
}
