// An outputs file's declared shapes are checked before its data is read: a file of a few KB can
// declare an o of gigabytes (HDF5 allocates a dataset's storage only when it is written), and a
// dimension past an int used to wrap in a cast.
#include <H5Cpp.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "harness/experiment/score.hpp"
#include "harness/io/dataset_file.hpp"
#include "harness/io/outputs_file.hpp"
#include "tests/catch.hpp"
#include "tests/error_text.hpp"

using namespace qattn;
namespace fs = std::filesystem;

namespace {

struct Folder {
  fs::path dir = fs::temp_directory_path() / ("qattn-declared-" + std::to_string(::getpid()));
  Folder() { fs::create_directories(dir); }
  ~Folder() { fs::remove_all(dir); }
};

// A valid outputs file of layer "0" ([heads, rows, dim] zeros), then its o replaced by an unwritten
// dataset of the declared shape.
std::string declared(const Folder& f, const std::string& name, int heads, int rows, int dim, std::vector<hsize_t> dims) {
  const std::string path = (f.dir / name).string();
  OutputsFile out;
  out.kernel = "declared";
  LayerOutputs l;
  l.layer = "0";
  l.o = TensorF(heads, rows, dim);
  for (int r = 0; r < rows; ++r) l.rows.push_back(r);
  out.layers.push_back(l);
  write_outputs(path, out);
  H5::H5File file(path, H5F_ACC_RDWR);
  file.unlink("/layers/0/o");
  file.createDataSet("/layers/0/o", H5::PredType::IEEE_F32LE, H5::DataSpace(3, dims.data()));
  return path;
}

bool has(const std::string& msg, const std::string& part) {
  if (msg.find(part) != std::string::npos) return true;
  UNSCOPED_INFO("message: " << msg);
  return false;
}

}  // namespace

TEST_CASE("a dimension past an int is refused, named", "[outputs][untrusted]") {
  Folder f;
  const std::string path = declared(f, "tall.h5", 1, 4, 1, {1, (hsize_t{1} << 31) + 5, 1});
  CHECK(fs::file_size(path) < 64 * 1024);
  CHECK(has(error_text([&] { (void)read_outputs(path); }), path + ": /layers/0/o: shape [1, 2147483653, 1]: dimension 1 is larger than 2147483647"));
}

TEST_CASE("the caller's check sees the declared shape before any of o is read", "[outputs][untrusted]") {
  Folder f;
  // 9 x 9437184 x 64 float32: 21.7 GB declared by a file of a few KB.
  const std::string path = declared(f, "huge.h5", 9, 4, 64, {9, 9437184, 64});
  CHECK(fs::file_size(path) < 64 * 1024);
  int seen_rows = 0, seen_last = 0;
  const std::string msg = error_text([&] {
    (void)read_outputs(path, [&](const std::string&, int, int rows, int, int, int last_row) {
      seen_rows = rows, seen_last = last_row;
      throw DatasetError("refused by the caller");
    });
  });
  CHECK(msg == "refused by the caller");
  CHECK(seen_rows == 9437184);
  CHECK(seen_last == 9437183);

  // And through score: the dump has 12 tokens, the file's o declares 9437184 rows.
  const std::string dump = (f.dir / "dump.h5").string();
  LayerToWrite l;
  l.name = "0";
  l.q = TensorF(9, 12, 64);
  l.k = TensorF(3, 12, 64);
  l.v = TensorF(3, 12, 64);
  for (TensorF* t : {&l.q, &l.k, &l.v})
    for (std::size_t i = 0; i < t->size(); ++i) t->data[i] = static_cast<float>(i % 7) / 7.0f;
  l.softmax_scale = 0.125;
  write_dataset(dump, {{"schema", attr(std::string("qattn-dump/1"))}, {"model", attr(std::string("test"))}, {"weights", attr(std::string("none"))},
                       {"text_source", attr(std::string("none"))}, {"n_tokens", attr(12LL)}, {"created_by", attr(std::string("tests"))},
                       {"created_at", attr(std::string("2026-01-01T00:00:00Z"))}},
                {l}, FormatId::fp32, std::nullopt);
  ScoreOptions o;
  o.dataset = dump;
  o.outputs = {path};
  o.output = (f.dir / "report").string();
  o.quiet = true;
  CHECK(has(error_text([&] { score_outputs(o); }), path + ": /layers/0/o: context 9437184 tokens; the dump has 12"));
  CHECK(!fs::exists(o.output));  // refused before the report folder was made
}

TEST_CASE("attributes are shown as what they are: a float count, an unsigned 64-bit value", "[outputs][untrusted]") {
  Folder f;
  const std::string path = declared(f, "attrs.h5", 2, 4, 8, {2, 4, 8});
  {
    H5::H5File file(path, H5F_ACC_RDWR);
    H5::Group g = file.openGroup("/layers/0");
    const double ctx = 256;
    g.createAttribute("context", H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR)).write(H5::PredType::NATIVE_DOUBLE, &ctx);
  }
  CHECK(has(error_text([&] { (void)read_outputs(path); }), "attribute 'context' = 256.0 (a float); expected a positive token count"));
  {
    H5::H5File file(path, H5F_ACC_RDWR);
    H5::Group g = file.openGroup("/layers/0");
    g.removeAttr("context");
    const unsigned long long big = ~0ULL;
    g.createAttribute("context", H5::PredType::STD_U64LE, H5::DataSpace(H5S_SCALAR)).write(H5::PredType::NATIVE_ULLONG, &big);
  }
  CHECK(has(error_text([&] { (void)read_outputs(path); }), "attribute 'context' = 18446744073709551615; expected an integer at most 9223372036854775807"));
}
