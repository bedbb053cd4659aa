// The schema-1 and schema-2 reader and writer: round trips, slices, and one clear error per malformed file.
#include <H5Cpp.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "harness/io/dataset_file.hpp"
#include "harness/io/hdf5_detail.hpp"
#include "kernels/formats/codec.hpp"
#include "tests/catch.hpp"
#include "tests/error_text.hpp"
#include "tests/reference/test_helpers.hpp"

using namespace qattn;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path dir;
  TempDir() {
    dir = fs::temp_directory_path() / ("qattn-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::create_directories(dir);
  }
  ~TempDir() { fs::remove_all(dir); }
  std::string file(const std::string& name) const { return (dir / name).string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

std::map<std::string, AttrValue> root_attrs(int tokens) {
  return {{"schema", attr(std::string("qattn-dump/1"))}, {"model", attr(std::string("test"))},
          {"weights", attr(std::string("none"))},        {"text_source", attr(std::string("none"))},
          {"n_tokens", attr(static_cast<long long>(tokens))}, {"created_by", attr(std::string("tests"))},
          {"created_at", attr(std::string("2026-01-01T00:00:00Z"))}};
}

LayerToWrite layer(const std::string& name, int hq, int hkv, int n, int d, std::uint64_t seed) {
  LayerToWrite l;
  l.name = name;
  l.q = test::random_tensor(hq, n, d, seed);
  l.k = test::random_tensor(hkv, n, d, seed + 1);
  l.v = test::random_tensor(hkv, n, d, seed + 2);
  l.causal = true;
  l.sliding_window = 0;
  l.softmax_scale = 0.125;
  return l;
}

// A valid file: layers 0, 2, 10 (numeric order, not lexical), GQA 6/2, 12 tokens, d 8.
std::string valid_file(const TempDir& t, const std::string& name = "valid.h5", FormatId dtype = FormatId::fp16) {
  const std::string path = t.file(name);
  std::vector<int> tokens(12);
  for (int i = 0; i < 12; ++i) tokens[i] = 100 + i;
  write_dataset(path, root_attrs(12), {layer("10", 6, 2, 12, 8, 1), layer("2", 6, 2, 12, 8, 4), layer("0", 6, 2, 12, 8, 7)},
                dtype, tokens);
  return path;
}

std::string open_error(const std::string& path) {
  return error_text([&] { (void)open_dataset(path); });
}

bool has(const std::string& msg, const std::string& part) {
  if (msg.find(part) != std::string::npos) return true;
  UNSCOPED_INFO("message: " << msg);
  return false;
}

// Edits a valid file in place with HDF5's own API.
template <typename F>
void edit(const std::string& path, F&& f) {
  H5::H5File file(path, H5F_ACC_RDWR);
  f(file);
}

void replace_dataset(H5::H5File& f, const std::string& path, const H5::DataType& type, std::vector<hsize_t> dims) {
  f.unlink(path);
  const H5::DataSpace sp(static_cast<int>(dims.size()), dims.data());
  f.createDataSet(path, type, sp);
}

void set_int_attr(H5::H5Object& obj, const std::string& name, long long v) {
  if (obj.attrExists(name)) obj.removeAttr(name);
  obj.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR)).write(H5::PredType::NATIVE_LLONG, &v);
}

void set_str_attr(H5::H5Object& obj, const std::string& name, const std::string& v) {
  if (obj.attrExists(name)) obj.removeAttr(name);
  const H5::StrType st(H5::PredType::C_S1, H5T_VARIABLE);
  obj.createAttribute(name, st, H5::DataSpace(H5S_SCALAR)).write(st, v);
}

}  // namespace

TEST_CASE("a written dump reads back: structure, attributes, values rounded to its dtype", "[datasets]") {
  TempDir t;
  for (FormatId dtype : {FormatId::fp16, FormatId::bf16, FormatId::fp32}) {
    INFO(name_of(dtype));
    const std::string path = valid_file(t, std::string("v_") + name_of(dtype) + ".h5", dtype);
    const DatasetInfo info = open_dataset(path);
    REQUIRE(info.layers.size() == 3);
    CHECK(info.layers[0].name == "0");
    CHECK(info.layers[1].name == "2");
    CHECK(info.layers[2].name == "10");
    CHECK(info.layers[0].q_heads == 6);
    CHECK(info.layers[0].kv_heads == 2);
    CHECK(info.layers[0].dtype == dtype);
    CHECK(info.layers[0].softmax_scale == 0.125);
    CHECK(info.has_tokens);
    CHECK(info.attrs.at("model").s == "test");
    const LayerSlice s = load_layer(info, "2");
    const LayerToWrite want = layer("2", 6, 2, 12, 8, 4);
    const Format f = format_of(dtype);
    for (std::size_t i = 0; i < want.k.size(); ++i) REQUIRE(s.problem.k.data[i] == static_cast<float>(round_to(f, want.k.data[i])));
    for (std::size_t i = 0; i < want.q.size(); ++i) REQUIRE(s.problem.q.data[i] == static_cast<float>(round_to(f, want.q.data[i])));
    CHECK(s.problem.causal);
    CHECK(s.problem.softmax_scale == 0.125);
  }
}

TEST_CASE("a slice holds the asked heads and tokens, and reads nothing else", "[datasets]") {
  TempDir t;
  const std::string path = valid_file(t);
  // Poison what the slice must not read: heads 0-2 (KV head 0) and tokens past 5 of every head.
  edit(path, [](H5::H5File& f) {
    for (const char* name : {"/layers/2/q", "/layers/2/k", "/layers/2/v"}) {
      H5::DataSet ds = f.openDataSet(name);
      H5::DataSpace sp = ds.getSpace();
      hsize_t dims[3];
      sp.getSimpleExtentDims(dims);
      std::vector<float> nan(dims[0] * dims[1] * dims[2], std::nanf(""));
      std::vector<float> orig(nan.size());
      ds.read(orig.data(), H5::PredType::NATIVE_FLOAT);
      const hsize_t first_kept = std::string(name) == "/layers/2/q" ? 3 : 1;
      for (hsize_t h = 0; h < dims[0]; ++h)
        for (hsize_t n = 0; n < dims[1]; ++n)
          for (hsize_t c = 0; c < dims[2]; ++c) {
            const hsize_t i = (h * dims[1] + n) * dims[2] + c;
            if (h >= first_kept && n < 5) nan[i] = orig[i];
          }
      ds.write(nan.data(), H5::PredType::NATIVE_FLOAT);
    }
  });
  const DatasetInfo info = open_dataset(path);
  SliceRequest req;
  req.heads = {5, 3};
  req.tokens = 5;
  const LayerSlice s = load_layer(info, "2", req);
  CHECK(s.q_heads == std::vector<int>{5, 3});
  CHECK(s.kv_heads == std::vector<int>{1, 1});
  CHECK(s.problem.q.heads == 2);
  CHECK(s.problem.k.heads == 2);
  CHECK(s.problem.q.tokens == 5);
  const LayerToWrite want = layer("2", 6, 2, 12, 8, 4);
  CHECK(s.problem.q(0, 4, 7) == static_cast<float>(round_to(format_of(FormatId::fp16), want.q(5, 4, 7))));
  CHECK(s.problem.k(1, 2, 3) == static_cast<float>(round_to(format_of(FormatId::fp16), want.k(1, 2, 3))));
  // The poisoned parts are really there: asking for them is an error naming the element.
  req.heads = {0};
  CHECK(has(error_text([&] { (void)load_layer(info, "2", req); }), "/layers/2/q[head 0, token 0, channel 0]: is NaN; expected finite values"));
  req.heads = {3};
  req.tokens = 6;
  CHECK(has(error_text([&] { (void)load_layer(info, "2", req); }), "[head 3, token 5, channel 0]: is NaN"));
  req.heads = {6};
  CHECK(has(error_text([&] { (void)load_layer(info, "2", req); }), "query head 6 requested; the layer has heads 0..5"));
  req.heads = {};
  req.tokens = 13;
  CHECK(has(error_text([&] { (void)load_layer(info, "2", req); }), "asked for the first 13 tokens; the layer has 12"));
  CHECK(has(error_text([&] { (void)load_layer(info, "3"); }), "/layers/3: no such layer; the file has layers 0, 2, 10"));
}

TEST_CASE("files that are not complete HDF5 files", "[datasets][errors]") {
  TempDir t;
  CHECK(has(open_error(t.file("nope.h5")), "nope.h5: no such file"));
  const std::string text = t.file("text.h5");
  std::ofstream(text) << "this is not HDF5\n";
  CHECK(has(open_error(text), "text.h5: not an HDF5 file (or truncated before its superblock)"));
  const std::string path = valid_file(t);
  const std::string cut = t.file("truncated.h5");
  fs::copy_file(path, cut);
  fs::resize_file(cut, fs::file_size(path) / 2);
  const std::string msg = open_error(cut);
  CHECK(has(msg, "truncated.h5: "));
  CHECK((has(msg, "truncated") || has(msg, "HDF5 error")));
}

TEST_CASE("schema and root attributes", "[datasets][errors]") {
  TempDir t;
  std::string p = valid_file(t, "a.h5");
  edit(p, [](H5::H5File& f) { f.removeAttr("schema"); });
  CHECK(has(open_error(p), "a.h5: /: attribute 'schema' is missing; expected \"qattn-dump/1\" or \"qattn-dump/2\""));
  p = valid_file(t, "b.h5");
  edit(p, [](H5::H5File& f) { set_str_attr(f, "schema", "qattn-dump/3"); });
  CHECK(has(open_error(p), "b.h5: /: schema \"qattn-dump/3\" is newer than this qattn reads (qattn-dump/2)"));
  p = valid_file(t, "c.h5");
  edit(p, [](H5::H5File& f) { set_str_attr(f, "schema", "other/1"); });
  CHECK(has(open_error(p), "attribute 'schema' = \"other/1\"; expected \"qattn-dump/1\" or \"qattn-dump/2\""));
  p = valid_file(t, "d.h5");
  edit(p, [](H5::H5File& f) { f.removeAttr("model"); });
  CHECK(has(open_error(p), "d.h5: /: attribute 'model' is missing; expected a string"));
  p = valid_file(t, "e.h5");
  edit(p, [](H5::H5File& f) { set_str_attr(f, "n_tokens", "twelve"); });
  CHECK(has(open_error(p), "attribute 'n_tokens' = \"twelve\" has the wrong type; expected the token count"));
  p = valid_file(t, "f.h5");
  edit(p, [](H5::H5File& f) { set_int_attr(f, "n_tokens", 11); });
  CHECK(has(open_error(p), "/layers/0/q: has 12 tokens but the root attribute n_tokens = 11; expected equal"));
}

TEST_CASE("layers, datasets, shapes and dtypes", "[datasets][errors]") {
  TempDir t;
  std::string p = valid_file(t, "a.h5");
  edit(p, [](H5::H5File& f) {
    f.unlink("/layers");
  });
  CHECK(has(open_error(p), "a.h5: /layers: missing group; expected /layers/<L> groups holding q, k, v"));
  p = valid_file(t, "b.h5");
  edit(p, [](H5::H5File& f) { f.unlink("/layers/2/k"); });
  CHECK(has(open_error(p), "b.h5: /layers/2/k: missing dataset; expected [Hkv, N, d] float16, bfloat16 or float32"));
  p = valid_file(t, "c.h5");
  edit(p, [](H5::H5File& f) { replace_dataset(f, "/layers/2/q", H5::PredType::IEEE_F32LE, {6, 96}); });
  CHECK(has(open_error(p), "c.h5: /layers/2/q: rank 2; expected 3 [Hq, N, d]"));
  p = valid_file(t, "d.h5");
  edit(p, [](H5::H5File& f) { replace_dataset(f, "/layers/2/v", H5::PredType::IEEE_F32LE, {2, 11, 8}); });
  CHECK(has(open_error(p), "/layers/2/v: shape [2, 11, 8] has other heads or tokens than k's [2, 12, 8]; expected [Hkv, N, dv]"));
  p = valid_file(t, "d2.h5");
  edit(p, [](H5::H5File& f) { replace_dataset(f, "/layers/2/v", H5::PredType::IEEE_F32LE, {2, 12, 4}); });
  CHECK(has(open_error(p), "/layers/2/v: head dim 4 differs from k's 8; a V head dim of its own is a schema-2 field, but the file says qattn-dump/1"));
  p = valid_file(t, "e.h5");
  edit(p, [](H5::H5File& f) { replace_dataset(f, "/layers/2/q", H5::PredType::IEEE_F32LE, {5, 12, 8}); });
  CHECK(has(open_error(p), "/layers/2: Hq = 5 is not a multiple of Hkv = 2"));
  p = valid_file(t, "f.h5");
  edit(p, [](H5::H5File& f) { replace_dataset(f, "/layers/2/q", H5::PredType::STD_I32LE, {6, 12, 8}); });
  CHECK(has(open_error(p), "/layers/2/q: dtype integer (4 bytes); expected float16, bfloat16 or float32"));
  p = valid_file(t, "g.h5");
  edit(p, [](H5::H5File& f) { replace_dataset(f, "/layers/2/q", H5::PredType::IEEE_F64LE, {6, 12, 8}); });
  CHECK(has(open_error(p), "/layers/2/q: dtype float (8 bytes); expected float16, bfloat16 or float32"));
  p = valid_file(t, "h.h5");
  edit(p, [](H5::H5File& f) { replace_dataset(f, "/layers/2/q", H5::PredType::IEEE_F32LE, {6, 12, 8}); });
  CHECK(has(open_error(p), "/layers/2: q, k and v have different dtypes"));
  p = valid_file(t, "i.h5");
  edit(p, [](H5::H5File& f) { replace_dataset(f, "/layers/2/q", H5::PredType::IEEE_F32LE, {6, 11, 8}); });
  CHECK(has(open_error(p), "/layers/2/q: has 11 tokens but k has 12; expected equal"));
  p = valid_file(t, "j.h5");
  edit(p, [](H5::H5File& f) { replace_dataset(f, "/tokens", H5::PredType::STD_I32LE, {11}); });
  CHECK(has(open_error(p), "/tokens: shape [11] integer (4 bytes); expected [12] int32"));
}

TEST_CASE("layer attributes", "[datasets][errors]") {
  TempDir t;
  std::string p = valid_file(t, "a.h5");
  edit(p, [](H5::H5File& f) { f.openGroup("/layers/10").removeAttr("causal"); });
  CHECK(has(open_error(p), "a.h5: /layers/10: attribute 'causal' is missing; expected 0 or 1"));
  p = valid_file(t, "b.h5");
  edit(p, [](H5::H5File& f) {
    H5::Group g = f.openGroup("/layers/10");
    set_int_attr(g, "causal", 2);
  });
  CHECK(has(open_error(p), "/layers/10: attribute 'causal' = 2; expected 0 or 1"));
  p = valid_file(t, "c.h5");
  edit(p, [](H5::H5File& f) {
    H5::Group g = f.openGroup("/layers/0");
    set_str_attr(g, "rope", "maybe");
  });
  CHECK(has(open_error(p), "/layers/0: attribute 'rope' = \"maybe\"; expected \"applied\" or \"none\""));
  p = valid_file(t, "d.h5");
  edit(p, [](H5::H5File& f) {
    H5::Group g = f.openGroup("/layers/0");
    set_int_attr(g, "sliding_window", -4);
  });
  CHECK(has(open_error(p), "/layers/0: attribute 'sliding_window' = -4; expected 0 (none) .. 2147483647"));
  // 2^31 and 2^32 do not fit the lab's int window: refused, not wrapped to negative or to 0 (no window).
  for (const long long w : {2147483648LL, 4294967296LL}) {
    p = valid_file(t, "w" + std::to_string(w) + ".h5");
    edit(p, [&](H5::H5File& f) {
      H5::Group g = f.openGroup("/layers/0");
      set_int_attr(g, "sliding_window", w);
    });
    CHECK(has(open_error(p), "/layers/0: attribute 'sliding_window' = " + std::to_string(w) + "; expected 0 (none) .. 2147483647"));
  }
  p = valid_file(t, "e.h5");
  edit(p, [](H5::H5File& f) {
    H5::Group g = f.openGroup("/layers/0");
    set_int_attr(g, "softmax_scale", 0);
  });
  CHECK(has(open_error(p), "/layers/0: attribute 'softmax_scale' = 0.000000; expected a positive finite float"));
}

TEST_CASE("NaN and Inf values are named by element", "[datasets][errors]") {
  TempDir t;
  const std::string p = valid_file(t, "a.h5", FormatId::fp32);
  edit(p, [](H5::H5File& f) {
    H5::DataSet ds = f.openDataSet("/layers/10/v");
    std::vector<float> x(2 * 12 * 8);
    ds.read(x.data(), H5::PredType::NATIVE_FLOAT);
    x[(1 * 12 + 7) * 8 + 2] = INFINITY;
    ds.write(x.data(), H5::PredType::NATIVE_FLOAT);
  });
  const DatasetInfo info = open_dataset(p);  // structure is fine; values are checked on load
  CHECK(has(error_text([&] { (void)load_layer(info, "10"); }), "a.h5: /layers/10/v[head 1, token 7, channel 2]: is Inf; expected finite values"));
}

TEST_CASE("writing is atomic and refuses values the dtype cannot hold", "[datasets][errors]") {
  TempDir t;
  const std::string p = valid_file(t, "a.h5");
  const auto before = fs::file_size(p);
  LayerToWrite bad = layer("0", 2, 1, 4, 4, 3);
  bad.k(0, 3, 1) = 1e6f;
  const std::string msg = error_text([&] { write_dataset(p, root_attrs(4), {bad}, FormatId::fp16); });
  CHECK(has(msg, "a.h5: /layers/0/k: value 1000000.000000 at element 13 does not fit fp16"));
  CHECK(fs::file_size(p) == before);  // the old file is untouched
  CHECK(open_dataset(p).layers.size() == 3);
  for (const auto& e : fs::directory_iterator(t.dir)) CHECK(e.path().string().find(".tmp.") == std::string::npos);
  CHECK(has(error_text([&] { write_dataset(t.file("no/such/dir/x.h5"), root_attrs(4), {bad}, FormatId::fp32); }), "x.h5"));
}

TEST_CASE("strings from a file must be UTF-8 (they go into JSON reports and Python)", "[datasets][utf8]") {
  using qattn::valid_utf8;
  for (const char* ok : {"", "abc", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9D\x84\x9E", "\xE2\x80\xA8", "\xF4\x8F\xBF\xBF"}) CHECK(valid_utf8(ok));
  // Overlong forms, a surrogate, past U+10FFFF, a lone continuation byte, cut sequences, 0xFF.
  for (const char* bad : {"\xC0\x80", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80", "\xE2\x82", "a\xC3", "\xFF"}) {
    INFO(qattn::shown_text(bad));
    CHECK_FALSE(valid_utf8(bad));
  }
  CHECK(qattn::shown_text("ab\xC0\x01") == "ab\\xc0\\x01");
}

TEST_CASE("schema 2: soft-cap, sink logits and chunks read back, sliced with their heads", "[datasets][variants]") {
  TempDir t;
  const std::string p = t.file("v2.h5");
  LayerToWrite l = layer("3", 4, 2, 6, 8, 11);
  l.softcap = 50.0;
  l.sinks = {0.5, -1.25, 2.0, 0.0};
  l.chunk = 4;
  l.alibi = {0.5, 0.25, 0.125, 0.0625};
  LayerToWrite mla = layer("5", 4, 2, 6, 8, 21);
  mla.v = test::random_tensor(2, 6, 12, 23);  // V's head dim 12 against Q/K's 8 (multi-head latent attention)
  std::vector<LayerToWrite> layers{layer("1", 4, 2, 6, 8, 1), l, mla};
  auto attrs = root_attrs(6);
  attrs["schema"] = attr(schema_for(layers));
  CHECK(schema_for(layers) == "qattn-dump/2");
  CHECK(schema_for({layer("1", 4, 2, 6, 8, 1)}) == "qattn-dump/1");
  CHECK(schema_for({mla}) == "qattn-dump/2");
  write_dataset(p, attrs, layers, FormatId::fp32);
  const DatasetInfo info = open_dataset(p);
  CHECK(info.layer("1").softcap == 0);
  CHECK(info.layer("1").sinks.empty());
  CHECK(info.layer("3").softcap == 50.0);
  CHECK(info.layer("3").sinks == l.sinks);
  const LayerSlice all = load_layer(info, "3");
  CHECK(all.problem.softcap == 50.0);
  CHECK(all.problem.chunk == 4);
  CHECK(load_layer(info, "1").problem.chunk == 0);
  CHECK(all.problem.sinks == l.sinks);
  SliceRequest req;
  req.heads = {3, 1};
  const LayerSlice some = load_layer(info, "3", req);
  CHECK(some.problem.sinks == std::vector<double>{0.0, -1.25});
  CHECK(some.problem.alibi == std::vector<double>{0.0625, 0.25});
  CHECK(load_layer(info, "1").problem.sinks.empty());
  CHECK(info.layer("5").dim == 8);
  CHECK(info.layer("5").v_dim == 12);
  const LayerSlice v12 = load_layer(info, "5", req);
  CHECK(v12.problem.v.dim == 12);
  CHECK(v12.problem.v(1, 5, 11) == mla.v(0, 5, 11));  // the slice's second head is query head 1, which reads KV head 0 (fp32: exact)
}

TEST_CASE("schema 2's fields: a version-1 file that has them, and bad values, are refused by name", "[datasets][variants][errors]") {
  TempDir t;
  std::string p = valid_file(t, "a.h5");
  edit(p, [](H5::H5File& f) {
    H5::Group g = f.openGroup("/layers/2");
    const double cap = 30.0;
    g.createAttribute("softcap", H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR)).write(H5::PredType::NATIVE_DOUBLE, &cap);
  });
  CHECK(has(open_error(p), "a.h5: /layers/2: attribute 'softcap' is a schema-2 field, but the file says qattn-dump/1; expected \"qattn-dump/2\""));
  edit(p, [](H5::H5File& f) { set_str_attr(f, "schema", "qattn-dump/2"); });
  CHECK(open_error(p).empty());
  edit(p, [](H5::H5File& f) {
    H5::Group g = f.openGroup("/layers/2");
    g.removeAttr("softcap");
    set_int_attr(g, "softcap", -3);
  });
  CHECK(has(open_error(p), "/layers/2: attribute 'softcap' = -3.000000; expected a positive finite float (absent = none)"));
  p = valid_file(t, "b.h5");
  edit(p, [](H5::H5File& f) {
    set_str_attr(f, "schema", "qattn-dump/2");
    const hsize_t n = 5;
    f.createDataSet("/layers/0/sinks", H5::PredType::IEEE_F64LE, H5::DataSpace(1, &n));
  });
  CHECK(has(open_error(p), "/layers/0/sinks: shape [5] float (8 bytes); expected [6] float (one per query head)"));
  p = valid_file(t, "c.h5");
  edit(p, [](H5::H5File& f) {
    H5::Group g = f.openGroup("/layers/10");
    set_int_attr(g, "attention_chunk", 0);
  });
  CHECK(has(open_error(p), "/layers/10: attribute 'attention_chunk' is a schema-2 field, but the file says qattn-dump/1"));
  edit(p, [](H5::H5File& f) { set_str_attr(f, "schema", "qattn-dump/2"); });
  CHECK(has(open_error(p), "/layers/10: attribute 'attention_chunk' = 0; expected 1 .. 2147483647 (absent = none)"));
}
