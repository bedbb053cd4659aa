// attn_ggml: runs ggml's flash attention the way llama.cpp drives it, on raw float32 Q/K/V, on
// ggml's CPU backend or (--backend cuda, when built against a ggml with its CUDA backend) on CUDA
// device 0. Both go through ggml-backend as llama.cpp does: the KV cache and each graph's tensors
// live in buffers of the chosen backend, inputs are uploaded and the output read back, so every op
// below runs on that backend.
//
// K and V are written into a KV cache of type q8_0, q4_0 or f16 by ggml_set_rows in the graph (so
// the backend's own quantizer runs, as llama.cpp's cpy_k/cpy_v do), then ggml_flash_attn_ext reads
// views of that cache: Q permuted to [d, tokens, heads], an f16 mask of 0 / -INF over n_kv cells,
// the softmax scale, max_bias 0, softcap 0, precision F32 (as llama.cpp sets it; on the CPU the
// default precision takes the same branch, and ggml's CUDA flash attention does not read it). n_kv
// is padded as llama.cpp's KV cache pads it: to a multiple of 256 cells, at least 256, at most the
// cache size (the cache holds pad(N, 256) cells).
//
// Prefill: the tokens go in ubatches of --ubatch tokens (llama.cpp's n_ubatch, default 512); each
// ubatch writes its K/V rows into the cache, then attends to the cache. Causal or not (not causal:
// one ubatch of all N tokens). Decode (--decode-rows): the whole K/V is written into the cache, then
// each listed row i runs alone (one query token) against keys 0..i.
//
// Inputs: raw float32 files, Q [Hq, N, d], K and V [Hkv, N, d] (row-major). Output: raw float32
// [Hq, R, d] with R = N (prefill) or the number of decode rows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#ifdef ATTN_GGML_CUDA
#include "ggml-cuda.h"
#endif

namespace {

struct Args {
  std::string q_path, k_path, v_path, out_path, type = "q8_0", backend = "cpu";
  int hq = 0, hkv = 0, n = 0, d = 0, threads = 2, ubatch = 512, pad = 256;
  float scale = 0;
  bool causal = true;
  std::vector<int> decode_rows;  // empty: prefill
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "attn_ggml: %s\n"
               "usage: attn_ggml --q Q.f32 --k K.f32 --v V.f32 --out O.f32 --hq HQ --hkv HKV --n N --d D\n"
               "                 --scale S [--type q8_0|q4_0|f16] [--causal 0|1] [--backend cpu|cuda]\n"
               "                 [--threads T (cpu)] [--ubatch U] [--pad P] [--decode-rows i,j,...]\n",
               why.c_str());
  std::exit(2);
}

int to_int(const std::string& flag, const std::string& s) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used != s.size() || v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) throw std::invalid_argument(s);
    return static_cast<int>(v);
  } catch (const std::exception&) {
    usage(flag + " expects an integer that fits an int, got '" + s + "'");
  }
}

float to_float(const std::string& flag, const std::string& s) {
  try {
    std::size_t used = 0;
    const float v = std::stof(s, &used);
    if (used != s.size() || !std::isfinite(v)) throw std::invalid_argument(s);
    return v;
  } catch (const std::exception&) {
    usage(flag + " expects a finite number, got '" + s + "'");
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
    else if (f == "--backend") a.backend = v;
    else if (f == "--hq") a.hq = to_int(f, v);
    else if (f == "--hkv") a.hkv = to_int(f, v);
    else if (f == "--n") a.n = to_int(f, v);
    else if (f == "--d") a.d = to_int(f, v);
    else if (f == "--threads") a.threads = to_int(f, v);
    else if (f == "--ubatch") a.ubatch = to_int(f, v);
    else if (f == "--pad") a.pad = to_int(f, v);
    else if (f == "--causal") a.causal = to_int(f, v) != 0;
    else if (f == "--scale") a.scale = to_float(f, v);
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
  if (a.backend != "cpu" && a.backend != "cuda") usage("--backend must be cpu or cuda, got '" + a.backend + "'");
#ifndef ATTN_GGML_CUDA
  if (a.backend == "cuda")
    usage("--backend cuda: this attn_ggml was built against a ggml without its CUDA backend "
          "(configure it with GGML_DIR a ggml built with -DGGML_CUDA=ON)");
#endif
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

// The chosen backend: the CPU with --threads threads, or CUDA device 0; freed on scope exit.
class Backend {
 public:
  explicit Backend(const Args& a) : b_(init(a)) {}
  ~Backend() { ggml_backend_free(b_); }
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  ggml_backend_t get() const { return b_; }

 private:
  static ggml_backend_t init(const Args& a) {
#ifdef ATTN_GGML_CUDA
    if (a.backend == "cuda") {
      ggml_backend_t b = ggml_backend_cuda_init(0);
      if (!b)
        throw std::runtime_error("ggml_backend_cuda_init(0) failed: no usable CUDA device 0 (ggml sees " +
                                 std::to_string(ggml_backend_cuda_get_device_count()) + " CUDA devices)");
      return b;
    }
#endif
    ggml_backend_t b = ggml_backend_cpu_init();  // also runs ggml_cpu_init
    if (!b) throw std::runtime_error("ggml_backend_cpu_init failed");
    ggml_backend_cpu_set_n_threads(b, a.threads);
    return b;
  }

  ggml_backend_t b_;
};

// A ggml context of tensor metadata only (no_alloc, as llama.cpp's): place() puts its tensors in
// one buffer of the backend. Both are freed on scope exit.
struct Context {
  ggml_context* ctx;
  ggml_backend_buffer_t buf = nullptr;
  Context() {
    // Room for 64 tensors (a graph here has 13) and one graph; the data lives in the buffer.
    ggml_init_params p = {64 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, /*no_alloc=*/true};
    ctx = ggml_init(p);
    if (!ctx) throw std::runtime_error("ggml_init failed");
  }
  ~Context() {
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  void place(ggml_backend_t backend) {
    buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (!buf) throw std::runtime_error(std::string("ggml_backend_alloc_ctx_tensors failed on ") + ggml_backend_name(backend));
  }
};

// One graph: tensors declared in a Context and their inputs kept on the host until compute() places
// the tensors on the backend, uploads the inputs and runs the nodes in the order they were added.
class Graph {
 public:
  Graph() : gf_(ggml_new_graph(c_.ctx)) {}
  ggml_context* ctx() const { return c_.ctx; }
  void add(ggml_tensor* t) { ggml_build_forward_expand(gf_, t); }

  // t, to be filled with `host` (exactly ggml_nbytes(t) bytes) once placed.
  template <class T>
  ggml_tensor* input(ggml_tensor* t, const std::vector<T>& host) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(host.data());
    inputs_.push_back({t, std::vector<unsigned char>(bytes, bytes + host.size() * sizeof(T))});
    return t;
  }

  void compute(ggml_backend_t backend) {
    check_supported(backend);
    c_.place(backend);
    for (const Input& in : inputs_) ggml_backend_tensor_set(in.t, in.bytes.data(), 0, in.bytes.size());
    if (ggml_backend_graph_compute(backend, gf_) != GGML_STATUS_SUCCESS)
      throw std::runtime_error(std::string("ggml_backend_graph_compute failed on ") + ggml_backend_name(backend));
  }

 private:
  struct Input {
    ggml_tensor* t;
    std::vector<unsigned char> bytes;
  };

  // ggml_backend_graph_compute does not ask; a backend given an op it lacks would abort mid-graph.
  void check_supported(ggml_backend_t backend) const {
    for (int i = 0; i < ggml_graph_n_nodes(gf_); ++i) {
      const ggml_tensor* node = ggml_graph_node(gf_, i);
      if (!ggml_backend_supports_op(backend, node))
        throw std::runtime_error(std::string(ggml_backend_name(backend)) + " does not support " + signature(node));
    }
  }

  // "OP(source types) -> type", e.g. FLASH_ATTN_EXT(f32, q4_0, q4_0, f16) -> f32.
  static std::string signature(const ggml_tensor* t) {
    std::string s = std::string(ggml_op_desc(t)) + "(";
    for (int i = 0; i < GGML_MAX_SRC && t->src[i]; ++i) s += std::string(i ? ", " : "") + ggml_type_name(t->src[i]->type);
    return s + ") -> " + ggml_type_name(t->type);
  }

  Context c_;
  ggml_cgraph* gf_;
  std::vector<Input> inputs_;
};

// The problem's tensors, the KV cache on the backend, and the graphs that fill and read it.
class Runner {
 public:
  Runner(const Args& a, ggml_backend_t backend, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v)
      : a_(a), backend_(backend), q_(q), k_(k), v_(v), type_(cache_type(a.type)), kv_size_(round_up(a.n, a.pad)) {
    k_cache_ = ggml_new_tensor_2d(cache_.ctx, type_, static_cast<int64_t>(a.d) * a.hkv, kv_size_);
    v_cache_ = ggml_new_tensor_2d(cache_.ctx, type_, static_cast<int64_t>(a.d) * a.hkv, kv_size_);
    cache_.place(backend);
    ggml_backend_buffer_clear(cache_.buf, 0);  // llama.cpp clears its cache buffers
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
  std::vector<float> gather(const std::vector<float>& x, int heads, const std::vector<int>& rows) const {
    std::vector<float> dst(rows.size() * heads * a_.d);
    for (std::size_t u = 0; u < rows.size(); ++u)
      for (int h = 0; h < heads; ++h)
        std::memcpy(&dst[(u * heads + h) * a_.d], &x[(static_cast<std::size_t>(h) * a_.n + rows[u]) * a_.d], a_.d * sizeof(float));
    return dst;
  }

  // The f16 mask [n_kv, tokens]: 0 where query row rows[u] sees cell j, -INF elsewhere.
  std::vector<ggml_fp16_t> mask_for(const std::vector<int>& rows, int n_kv) const {
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f), neg_inf = ggml_fp32_to_fp16(-INFINITY);
    std::vector<ggml_fp16_t> m(rows.size() * n_kv);
    for (std::size_t u = 0; u < rows.size(); ++u) {
      const int last = a_.causal || !a_.decode_rows.empty() ? rows[u] : a_.n - 1;  // last visible key
      for (int j = 0; j < n_kv; ++j) m[u * n_kv + j] = j <= last ? zero : neg_inf;
    }
    return m;
  }

  // ggml_set_rows of tokens `rows` into both caches (the backend's from_float for the cache type runs).
  void add_kv_writes(Graph& g, const std::vector<int>& rows) {
    const int64_t nt = static_cast<int64_t>(rows.size()), width = static_cast<int64_t>(a_.d) * a_.hkv;
    ggml_tensor* idx = g.input(ggml_new_tensor_1d(g.ctx(), GGML_TYPE_I64, nt), std::vector<int64_t>(rows.begin(), rows.end()));
    ggml_tensor* kc = g.input(ggml_new_tensor_2d(g.ctx(), GGML_TYPE_F32, width, nt), gather(k_, a_.hkv, rows));
    ggml_tensor* vc = g.input(ggml_new_tensor_2d(g.ctx(), GGML_TYPE_F32, width, nt), gather(v_, a_.hkv, rows));
    g.add(ggml_set_rows(g.ctx(), k_cache_, kc, idx));
    g.add(ggml_set_rows(g.ctx(), v_cache_, vc, idx));
  }

  void write_all_kv() {
    std::vector<int> rows;
    for (int t = 0; t < a_.n; ++t) rows.push_back(t);
    Graph g;
    add_kv_writes(g, rows);
    g.compute(backend_);
  }

  // One graph: (optionally) the K/V writes of `rows`, then flash attention of those query rows
  // against the cache's first n_kv cells. Query row i sees keys 0..i (causal) or 0..N-1.
  void run(const std::vector<int>& rows, bool write_kv, int used, std::vector<float>& out, int row0, int rows_total = -1) {
    const int nt = static_cast<int>(rows.size()), n_kv = n_kv_for(used), d = a_.d;
    const std::size_t k_row = ggml_row_size(type_, d), kv_row = ggml_row_size(type_, static_cast<int64_t>(d) * a_.hkv);
    Graph g;
    if (write_kv) add_kv_writes(g, rows);

    ggml_tensor* q = g.input(ggml_new_tensor_3d(g.ctx(), GGML_TYPE_F32, d, a_.hq, nt), gather(q_, a_.hq, rows));  // [d, heads, tokens], as Qcur
    ggml_tensor* qp = ggml_permute(g.ctx(), q, 0, 2, 1, 3);  // [d, tokens, heads]

    // Views of the cache as llama.cpp's get_k / get_v take them: [d, heads, n_kv] permuted to [d, n_kv, heads].
    ggml_tensor* kv = ggml_permute(g.ctx(), ggml_view_3d(g.ctx(), k_cache_, d, a_.hkv, n_kv, k_row, kv_row, 0), 0, 2, 1, 3);
    ggml_tensor* vv = ggml_permute(g.ctx(), ggml_view_3d(g.ctx(), v_cache_, d, a_.hkv, n_kv, k_row, kv_row, 0), 0, 2, 1, 3);
    ggml_tensor* mask = g.input(ggml_new_tensor_2d(g.ctx(), GGML_TYPE_F16, n_kv, nt), mask_for(rows, n_kv));

    ggml_tensor* o = ggml_flash_attn_ext(g.ctx(), qp, kv, vv, mask, a_.scale, 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(o, GGML_PREC_F32);
    g.add(o);  // after the cache writes: graph nodes run in order
    g.compute(backend_);

    // o is [d, heads, tokens] float32.
    std::vector<float> res(static_cast<std::size_t>(ggml_nelements(o)));
    ggml_backend_tensor_get(o, res.data(), 0, ggml_nbytes(o));
    const int total = rows_total > 0 ? rows_total : a_.n;
    for (int u = 0; u < nt; ++u)
      for (int h = 0; h < a_.hq; ++h)
        std::memcpy(&out[(static_cast<std::size_t>(h) * total + row0 + u) * d], &res[(static_cast<std::size_t>(u) * a_.hq + h) * d], d * sizeof(float));
  }

  const Args& a_;
  ggml_backend_t backend_;
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
    Backend backend(a);
    Runner runner(a, backend.get(), q, k, v);
    write_f32(a.out_path, a.decode_rows.empty() ? runner.prefill() : runner.decode(a.decode_rows));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attn_ggml: %s\n", e.what());
    return 1;
  }
  return 0;
}
