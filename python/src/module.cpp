// qattn._core: the Python face of the lab's C++ library (nanobind). Every number comes from the C++
// code the CLI runs; this file only converts arguments and results.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>


#include "harness/experiment/backend.hpp"
#include "harness/experiment/bounds.hpp"
#include "harness/experiment/fit.hpp"
#include "harness/experiment/progress.hpp"
#include "harness/experiment/report_folder.hpp"
#include "harness/experiment/report_run.hpp"
#include "harness/experiment/report_io.hpp"
#include "harness/experiment/score.hpp"
#include "harness/experiment/unit_score.hpp"
#include "harness/io/dataset_file.hpp"
#include "harness/parallel/ranks.hpp"
#include "harness/io/outputs_file.hpp"
#include "harness/io/recipe_io.hpp"
#include "harness/io/rows_text.hpp"
#include "harness/system/memory.hpp"
#include "kernels/emulate/emulator.hpp"
#include "kernels/formats/codec.hpp"
#include "kernels/formats/quantizer.hpp"
#include "kernels/formats/registry.hpp"
#include "kernels/problem/parallel_tasks.hpp"
#include "python/src/arrays.hpp"
#include "reference/attention.hpp"
#include "reference/channel_stats.hpp"
#include "reference/metrics.hpp"
#include "reference/statistics.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace qattn::py {

namespace {

// ---- rows ----

// ---- arguments ----

// A user's probability row, checked here (the lab's own callers check their outputs first), so a
// NaN entry is an error rather than a NaN statistic.
void require_probabilities(const std::vector<double>& p, const char* call, const char* name) {
  for (std::size_t j = 0; j < p.size(); ++j) {
    if (!(p[j] >= 0 && p[j] <= 1)) {
      throw std::invalid_argument(std::string(call) + ": " + name + "[" + std::to_string(j) + "] = " + std::to_string(p[j]) +
                                  "; expected a probability (finite, in [0, 1])");
    }
  }
}
// Python values checked by type, so a wrong one is an error naming the argument instead of
// nanobind's std::bad_cast.

std::string shown(const nb::handle& h) {
  std::string r = nb::cast<std::string>(nb::repr(h));
  return r.size() > 80 ? r.substr(0, 80) + "... (" + std::to_string(r.size()) + " characters)" : r;
}

long long int_arg(const nb::handle& h, const std::string& name, long long lo, long long hi, const char* expected) {
  long long v = 0;
  if (!nb::isinstance<nb::int_>(h) || nb::isinstance<nb::bool_>(h) || !nb::try_cast(h, v) || v < lo || v > hi) {
    throw std::invalid_argument(name + ": " + shown(h) + "; expected " + expected);
  }
  return v;
}

bool bool_arg(const nb::handle& h, const std::string& name) {
  if (!nb::isinstance<nb::bool_>(h)) throw std::invalid_argument(name + ": " + shown(h) + "; expected True or False");
  return nb::cast<bool>(h);
}

double float_arg(const nb::handle& h, const std::string& name, const char* expected) {
  if (nb::isinstance<nb::bool_>(h) || !(nb::isinstance<nb::float_>(h) || nb::isinstance<nb::int_>(h))) {
    throw std::invalid_argument(name + ": " + shown(h) + "; expected " + expected);
  }
  return nb::cast<double>(h);
}

std::string str_arg(const nb::handle& h, const std::string& name, const char* expected) {
  if (!nb::isinstance<nb::str>(h)) throw std::invalid_argument(name + ": " + shown(h) + "; expected " + expected);
  return nb::cast<std::string>(h);
}

// None or "all"; (begin, end); a sequence or array of row indices; "range:B:E"; "sample:COUNT:SEED".
RowSelection parse_rows(const nb::handle& rows) {
  if (rows.is_none()) return RowSelection::all_rows();
  if (nb::isinstance<nb::str>(rows)) return rows_from_string(nb::cast<std::string>(rows), "rows");
  if (nb::isinstance<nb::tuple>(rows) && nb::len(rows) == 2) {
    return RowSelection::range_of(static_cast<int>(int_arg(rows[0], "rows[0]", 0, kMaxDimension, "a row index >= 0 (rows=(begin, end))")),
                                  static_cast<int>(int_arg(rows[1], "rows[1]", 0, kMaxDimension, "a row index >= 0 (rows=(begin, end))")));
  }
  AnyArray a;
  if (nb::try_cast(rows, a)) return RowSelection::list_of(to_ints(a, "rows"));
  std::vector<int> list;
  if (nb::try_cast(rows, list)) return RowSelection::list_of(list);
  throw std::invalid_argument("rows: expected None, 'all', 'range:BEGIN:END', 'sample:COUNT:SEED', (begin, end) or a list of rows");
}

// The rows a selection names in a context of n tokens, without listing them.
std::uint64_t selected_rows(const RowSelection& r, std::uint64_t n) {
  switch (r.kind) {
    case RowSelection::Kind::all: return n;
    case RowSelection::Kind::range: return r.end > r.begin ? std::min<std::uint64_t>(n, static_cast<std::uint64_t>(r.end - r.begin)) : 0;
    case RowSelection::Kind::sample: return std::min<std::uint64_t>(n, static_cast<std::uint64_t>(std::max(r.count, 0)));
    case RowSelection::Kind::list: return r.listed.size();
  }
  return n;
}

// What one attention call allocates at least, checked before any of it is: Q, K and V as float32,
// the output [Hq, R, d] (out_bytes an element) and the probability rows [Hq, P, N] (float64).
void require_attention_memory(const AnyArray& q, const AnyArray& k, const AnyArray& v, const RowSelection& rows, std::size_t prob_rows,
                              std::uint64_t out_bytes, std::uint64_t work_bytes) {
  check_tensor_shape(q, "q");
  check_tensor_shape(k, "k");
  check_tensor_shape(v, "v");
  const std::uint64_t nq = element_count(q, "q"), nk = element_count(k, "k"), nv = element_count(v, "v");
  const std::uint64_t hq = q.shape(0), n = q.shape(1), d = v.shape(2);  // the output has V's head dim
  const std::string what = "q, k, v";
  // The float32 copies, and work_bytes an element for what the engine makes of them (the
  // emulator's codes and dequantized operands).
  const std::uint64_t in_bytes = 4 + work_bytes;
  const std::uint64_t bytes = checked_sum(what, {checked_product(what, {in_bytes, nq}), checked_product(what, {in_bytes, nk}), checked_product(what, {in_bytes, nv}),
                                                 checked_product(what, {out_bytes, hq, selected_rows(rows, n), d}),
                                                 checked_product("prob_rows", {8, hq, prob_rows, n})});
  require_memory(what + " (" + std::to_string(nq) + ", " + std::to_string(nk) + " and " + std::to_string(nv) +
                     " elements: the float32 copies, the output and the probability rows)",
                 bytes);
}

// The attention variants a problem may carry (softcap 0 and no sinks: plain attention).
struct VariantArgs {
  double softcap = 0;
  std::optional<std::vector<double>> sinks;
  int chunk = 0;
  std::optional<std::vector<double>> alibi;
};

Problem make_problem(const ArrayArg& q_arg, const ArrayArg& k_arg, const ArrayArg& v_arg, bool causal, int window, double scale,
                     const nb::handle& rows, const VariantArgs& variants = {}, std::size_t prob_rows = 0, std::uint64_t out_bytes = 4,
                     std::uint64_t work_bytes = 0) {
  const AnyArray q = array_of(q_arg, "q"), k = array_of(k_arg, "k"), v = array_of(v_arg, "v");
  Problem p;
  p.rows = parse_rows(rows);
  require_attention_memory(q, k, v, p.rows, prob_rows, out_bytes, work_bytes);
  p.q = to_tensor(q, "q");
  p.k = to_tensor(k, "k");
  p.v = to_tensor(v, "v");
  p.causal = causal;
  p.window = window;
  p.softmax_scale = scale;
  p.softcap = variants.softcap;
  if (variants.sinks) p.sinks = *variants.sinks;
  p.chunk = variants.chunk;
  if (variants.alibi) p.alibi = *variants.alibi;
  validate(p);
  return p;
}

Recipe recipe_arg(const nb::handle& r) {
  if (nb::isinstance<Recipe>(r)) return nb::cast<Recipe>(r);
  if (nb::isinstance<nb::str>(r)) return recipe_from_string(nb::cast<std::string>(r));
  throw std::invalid_argument("recipe: expected a qattn.Recipe or a one-line recipe string");
}

// Ctrl-C during a long C++ call (between its units), not only when it ends: the GIL is taken
// back for the check, and a pending KeyboardInterrupt is raised from there.
void interrupt_check() {
  nb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw nb::python_error();
}

// A report row as Python values (what json.loads of its line gives): numbers, strings, None, lists, dicts.
nb::object py_from_json(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return nb::none();
    case nlohmann::json::value_t::boolean: return nb::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return nb::int_(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return nb::int_(j.get<std::uint64_t>());
    case nlohmann::json::value_t::number_float: return nb::float_(j.get<double>());
    case nlohmann::json::value_t::string: return nb::str(j.get_ref<const std::string&>().c_str(), j.get_ref<const std::string&>().size());
    case nlohmann::json::value_t::array: {
      nb::list l;
      for (const auto& x : j) l.append(py_from_json(x));
      return l;
    }
    case nlohmann::json::value_t::object: {
      nb::dict d;
      for (const auto& [k, v] : j.items()) d[nb::str(k.c_str(), k.size())] = py_from_json(v);
      return d;
    }
    default: throw std::logic_error("py_from_json: a JSON value with no Python form");
  }
}

nb::dict metrics_dict(const ErrorMetrics& m) {
  nb::dict d;
  for (const ErrorField& f : kErrorFields) d[f.name] = m.*f.value;
  d["count"] = m.count;
  return d;
}

nb::object attr_to_py(const AttrValue& v) {
  switch (v.kind) {
    case AttrValue::Kind::string: return nb::str(v.s.c_str());
    case AttrValue::Kind::integer: return nb::int_(v.i);
    case AttrValue::Kind::real: return nb::float_(v.d);
  }
  return nb::none();
}

AttrValue attr_from_py(const std::string& key, const nb::handle& o) {
  if (nb::isinstance<nb::str>(o)) return attr(nb::cast<std::string>(o));
  if (nb::isinstance<nb::bool_>(o)) return attr(static_cast<long long>(nb::cast<bool>(o)));
  if (nb::isinstance<nb::int_>(o)) return attr(nb::cast<long long>(o));
  if (nb::isinstance<nb::float_>(o)) return attr(nb::cast<double>(o));
  throw std::invalid_argument("attrs['" + key + "']: expected a str, int or float");
}

std::map<std::string, AttrValue> attrs_from_py(const nb::dict& d) {
  std::map<std::string, AttrValue> out;
  for (auto [k, v] : d) out[nb::cast<std::string>(k)] = attr_from_py(nb::cast<std::string>(k), v);
  return out;
}

template <typename T>
nb::object rows_array(std::vector<T>&& v) {
  const std::size_t n = v.size();
  return to_numpy(std::move(v), {n}).cast();
}

// A NaN or Inf is never handed back as a result: finite inputs can still overflow (a huge
// softmax_scale, scores past float32, sums past the largest float), and that is an error.
template <typename T>
void require_finite(const Tensor3<T>& t, const char* call, const char* what) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = t.size(); i-- > 0;)
    if (!std::isfinite(t.data[i])) ++bad, first = i;
  if (bad == 0) return;
  const std::size_t c = first % t.dim, r = (first / t.dim) % t.tokens, h = first / (static_cast<std::size_t>(t.dim) * t.tokens);
  throw std::invalid_argument(std::string(call) + ": the " + what + " has " + std::to_string(bad) + " non-finite value(s) (first: [" +
                              std::to_string(h) + ", " + std::to_string(r) + ", " + std::to_string(c) + "] is " +
                              (std::isnan(t.data[first]) ? "NaN" : "Inf") +
                              "): the scores or the sums overflow (softmax_scale times q.k past the format's range, or every P "
                              "of a row flushed to zero); expected inputs and a softmax_scale whose attention stays finite");
}

// The reference's and the emulator's results as a dict of arrays (the buffers move into NumPy).
template <typename Result>
nb::dict attention_dict(Result& r, const char* call) {
  require_finite(r.out, call, "output");
  require_finite(r.probs, call, "probability rows");
  nb::dict d;
  d["rows"] = rows_array(std::move(r.rows));
  d["out"] = to_numpy(std::move(r.out));
  d["prob_rows"] = rows_array(std::move(r.prob_rows));
  d["probs"] = to_numpy(std::move(r.probs));
  return d;
}

}  // namespace

}  // namespace qattn::py

NB_MODULE(_core, m) {
  using namespace qattn;
  using namespace qattn::py;
  m.attr("__version__") = QATTN_VERSION;
  m.def("_set_figure_tools", &report::set_figure_tools, "python"_a, "scripts_dir"_a,
        "Draw figures with this interpreter and the scripts in this folder (an installed package's own).");
  m.doc() = "The C++ core of qattn (formats, recipes, float64 reference, emulator, GPU backend, metrics, statistics, dumps, scoring).";
  nb::exception<DatasetError>(m, "DatasetError", PyExc_ValueError);
  // The calls check what they allocate before they start; an allocation that fails all the same
  // (another process took the memory meanwhile) is one clear MemoryError, not "std::bad_alloc".
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, ("out of memory: the arguments need more than the " + bytes_text(available_memory()) +
                                          " available here; expected smaller arrays (fewer heads, tokens or rows)").c_str());
    }
  });

  // ---- formats ----
  m.def("formats", [] {
    std::vector<std::string> names;
    for (FormatId id : all_formats()) names.push_back(name_of(id));
    return names;
  }, "The format names the lab knows, in the order of the library's format ids.");
  m.def("format_info", [](const std::string& name) {
    const Format f = format_of(parse_format(name));
    nb::dict d;
    d["name"] = name;
    d["kind"] = f.kind == Kind::integer ? "integer" : "floating";
    d["bits"] = f.bits;
    d["exp_bits"] = f.exp_bits;
    d["man_bits"] = f.man_bits;
    d["bias"] = f.bias;
    d["max_finite"] = max_finite(f);
    d["min_normal"] = min_normal(f);
    d["min_subnormal"] = min_subnormal(f);
    d["epsilon"] = epsilon(f);
    d["flush_below"] = flush_threshold(f);
    d["has_inf"] = has_inf(f);
    d["has_nan"] = has_nan(f);
    return d;
  }, "name"_a, "Constants of a format: bits, bias, max finite, min normal/subnormal, epsilon and flush_below (the largest |x| that encodes to zero).");
  m.def("encode", [](const ArrayArg& x, const std::string& fmt) {
    const Format f = format_of(parse_format(fmt, "encode: format"));
    const AnyArray a = array_of(x, "x");
    // float64 values and uint32 codes an element, before either is made.
    require_memory("x (" + std::to_string(element_count(a, "x")) + " elements, as float64 and codes)", checked_product("x", {12, element_count(a, "x")}));
    std::vector<std::size_t> shape;
    const std::vector<double> v = to_doubles(a, "x", &shape);
    std::vector<std::uint32_t> codes(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) codes[i] = encode(f, v[i]);
    return to_numpy(std::move(codes), shape);
  }, "x"_a, "format"_a, "Codes (uint32, same shape) of x in the format: round to nearest even, then the format's saturation.");
  m.def("decode", [](const nb::ndarray<nb::ro, const std::uint32_t, nb::c_contig, nb::device::cpu>& codes, const std::string& fmt) {
    const Format f = format_of(parse_format(fmt, "decode: format"));
    std::vector<std::size_t> shape;
    std::size_t n = 1;
    for (std::size_t i = 0; i < codes.ndim(); ++i) shape.push_back(codes.shape(i)), n *= codes.shape(i);
    std::vector<double> out(n);
    const std::uint32_t mask = code_mask(f);
    for (std::size_t i = 0; i < n; ++i) {
      if (codes.data()[i] & ~mask) throw std::invalid_argument("decode: codes[" + std::to_string(i) + "] = " + std::to_string(codes.data()[i]) + " does not fit " + fmt + "'s " + std::to_string(f.bits) + " bits");
      out[i] = decode(f, codes.data()[i]);
    }
    return to_numpy(std::move(out), shape);
  }, "codes"_a, "format"_a, "Values (float64, same shape) of uint32 codes of the format.");
  m.def("round_to", [](const ArrayArg& x, const std::string& fmt) {
    const Format f = format_of(parse_format(fmt, "round_to: format"));
    std::vector<std::size_t> shape;
    std::vector<double> v = to_doubles(x, "x", &shape);
    for (double& e : v) e = round_to(f, e);
    return to_numpy(std::move(v), shape);
  }, "x"_a, "format"_a, "x rounded to the format (float64): decode(encode(x)).");

  nb::class_<QuantizedTensor>(m, "QuantizedTensor", "Codes and scales of a [heads, tokens, dim] tensor quantized by one operand spec.")
      .def_prop_ro("codes", [](const QuantizedTensor& q) {
        std::vector<std::uint32_t> c(q.codes);
        return to_numpy(std::move(c), {static_cast<std::size_t>(q.heads), static_cast<std::size_t>(q.tokens), static_cast<std::size_t>(q.dim)});
      }, nb::rv_policy::automatic, "Codes [heads, tokens, dim] (uint32) in the element format.")
      .def_prop_ro("scales", [](const QuantizedTensor& q) { std::vector<float> s(q.scales); return rows_array(std::move(s)); }, nb::rv_policy::automatic,
                   "Scales (float32), one per group, in the quantizer's layout (see scale_index).")
      .def("scale_index", &QuantizedTensor::scale_index, "head"_a, "token"_a, "channel"_a, "Index into scales of element (head, token, channel).")
      .def_prop_ro("spec", [](const QuantizedTensor& q) { return operand_to_string(OperandQuant{q.spec, false}); }, "The operand spec, e.g. 'int8/token'.")
      .def("dequantize", [](const QuantizedTensor& q) { return to_numpy(dequantize(q)); }, "Values decode(code) * scale, float32 [heads, tokens, dim].");
  m.def("quantize", [](const ArrayArg& x, const std::string& spec) {
    const OperandQuant o = operand_from_string(spec, "quantize: spec");
    if (o.unit_scale) throw std::invalid_argument("quantize: spec '" + spec + "' has no scale; expected FORMAT/GRANULARITY (e.g. int8/token) or FORMAT/static:S; use round_to() for plain rounding");
    const AnyArray a = array_of(x, "x");
    check_tensor_shape(a, "x");
    // The float32 copy and the codes (uint32) an element, before either is made.
    require_memory("x (" + std::to_string(element_count(a, "x")) + " elements, as float32 and codes)", checked_product("x", {8, element_count(a, "x")}));
    const TensorF t = to_tensor(a, "x");
    validate(o.spec, t.heads, t.tokens, t.dim);
    return quantize(t, o.spec);
  }, "x"_a, "spec"_a, "Quantize a [heads, tokens, dim] tensor as one recipe operand: 'int8/token', 'int4/group:32/scale:fp16', 'e4m3/static:448', ...");
  m.def("dequantize", [](const QuantizedTensor& q) { return to_numpy(dequantize(q)); }, "q"_a, "Values decode(code) * scale, float32.");

  // ---- recipes ----
  nb::class_<Recipe>(m, "Recipe", "A recipe: everything that changes the numbers of one quantized attention evaluation. "
                                  "Built from its one-line form (Recipe('q=int8/token k=int8/token p=e4m3/static:448')) or JSON (Recipe.from_json).")
      .def("__init__", [](Recipe* r, const std::string& line) { new (r) Recipe(recipe_from_string(line)); }, "line"_a = "",
           "Parse and validate a one-line recipe (omitted keys keep their defaults; '' is the fp32 recipe).")
      .def_static("from_json", [](const nb::handle& obj) {
        nb::module_ json = nb::module_::import_("json");
        const std::string text = nb::isinstance<nb::str>(obj) ? nb::cast<std::string>(obj) : nb::cast<std::string>(json.attr("dumps")(obj));
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(text);
        } catch (const nlohmann::json::parse_error& e) {
          throw std::invalid_argument(std::string("recipe JSON: ") + e.what());
        }
        return recipe_from_json(j);
      }, "obj"_a, "Parse and validate a recipe from a dict or a JSON string (the same keys as the one-line form).")
      .def("to_json", [](const Recipe& r) { return nb::module_::import_("json").attr("loads")(to_json(r).dump()); },
           "The recipe as a dict (every key, operands and accumulators as strings).")
      .def("__str__", [](const Recipe& r) { return to_string(r); }, "The canonical one-line form (every key, fixed order).")
      .def("__repr__", [](const Recipe& r) { return "qattn.Recipe('" + to_string(r) + "')"; })
      .def("__eq__", [](const Recipe& a, const Recipe& b) { return to_string(a) == to_string(b); })
      .def("__hash__", [](const Recipe& r) { return std::hash<std::string>{}(to_string(r)); });

  m.def("presets", [] {
    nb::list out;
    for (const RecipePreset& p : recipe_presets()) {
      nb::dict d;
      d["name"] = p.name;
      d["recipe"] = p.line;
      d["source"] = p.source;
      d["note"] = p.note;
      out.append(d);
    }
    return out;
  }, "The named recipes of real kernels (use as Recipe('preset=NAME ...')): name, recipe line, the source it was read from, and a note.");

  // ---- attention ----
  m.def("reference", [](const ArrayArg& q, const ArrayArg& k, const ArrayArg& v, bool causal, int window, double softmax_scale,
                        const nb::handle& rows, std::vector<int> prob_rows, double softcap, std::optional<std::vector<double>> sinks, int chunk, std::optional<std::vector<double>> alibi) {
    const Problem p = make_problem(q, k, v, causal, window, softmax_scale, rows, {softcap, sinks, chunk, alibi}, prob_rows.size(), 8);
    ReferenceOptions o;
    o.prob_rows = prob_rows;
    ReferenceResult r;
    {
      nb::gil_scoped_release release;
      r = reference_attention(p, o);
    }
    return attention_dict(r, "reference");
  }, "q"_a, "k"_a, "v"_a, nb::kw_only(), "causal"_a = false, "window"_a = 0, "softmax_scale"_a = 0.0, "rows"_a = nb::none(),
        "prob_rows"_a = std::vector<int>{}, "softcap"_a = 0.0, "sinks"_a = nb::none(), "chunk"_a = 0, "alibi"_a = nb::none(),
        "The float64 reference. q [Hq, N, d], k and v [Hkv, N, d] (Hq a multiple of Hkv: GQA); window 0 = none; softmax_scale 0 = 1/sqrt(d); "
        "softcap c > 0 soft-caps the scaled scores (c tanh(s / c)); sinks: one sink logit per query head, joining the denominator; "
        "chunk C > 0: query i sees only the keys of its own chunk of C tokens; alibi: one ALiBi slope per query head (-slope |i - j| "
        "joins the scaled score); "
        "rows: None/'all', (begin, end), 'sample:COUNT:SEED' or a list. Returns {'rows', 'out' [Hq, R, d] float64, 'prob_rows', "
        "'probs' [Hq, len(prob_rows), N] float64}.");
  m.def("sample_rows", [](int tokens, int count, std::uint64_t seed) {
    // The rows, and the positions the draw moves (a hash map: about 64 bytes a row).
    require_memory("sample_rows: count " + std::to_string(count), checked_product("count", {64, static_cast<std::uint64_t>(std::max(count, 0))}));
    return rows_array(RowSelection::sample_of(count, seed).resolve(tokens));
  },
        "tokens"_a, "count"_a, "seed"_a, "The lab's seeded sample of query rows (sorted), as 'sample:COUNT:SEED' and the experiments draw it.");
  m.def("emulate", [](const ArrayArg& q, const ArrayArg& k, const ArrayArg& v, const nb::handle& recipe, bool causal, int window,
                      double softmax_scale, const nb::handle& rows, std::vector<int> prob_rows, int threads, double softcap,
                      std::optional<std::vector<double>> sinks, int chunk, std::optional<std::vector<double>> alibi) {
    const Problem p = make_problem(q, k, v, causal, window, softmax_scale, rows, {softcap, sinks, chunk, alibi}, prob_rows.size(), 4, 8);
    const Recipe r = recipe_arg(recipe);
    EmulatorOptions o;
    o.prob_rows = prob_rows;
    o.threads = threads;
    EmulatorResult e;
    {
      nb::gil_scoped_release release;
      e = emulate(p, r, o);
    }
    return attention_dict(e, "emulate");
  }, "q"_a, "k"_a, "v"_a, "recipe"_a, nb::kw_only(), "causal"_a = false, "window"_a = 0, "softmax_scale"_a = 0.0, "rows"_a = nb::none(),
        "prob_rows"_a = std::vector<int>{}, "threads"_a = 0, "softcap"_a = 0.0, "sinks"_a = nb::none(), "chunk"_a = 0, "alibi"_a = nb::none(),
        "The bit-faithful emulator of the recipe's tiled kernel. Arguments as reference(). Returns {'rows', 'out' [Hq, R, d] float32, "
        "'prob_rows', 'probs' [Hq, len(prob_rows), N]: the weight each key actually received}. threads never changes a bit.");
  m.def("max_threads", &max_threads, "The most threads the lab's CPU engines accept (threads=, OMP_NUM_THREADS): a few per processor.");
  m.def("gpu_available", &backend::gpu_built, "Whether this build has the GPU kernels (configured with -DQATTN_GPU=CUDA or HIP).");
  m.def("gpu_not_covered", [](const ArrayArg& q, const ArrayArg& k, const ArrayArg& v, const nb::handle& recipe, bool causal, int window,
                              double softmax_scale, const nb::handle& rows, double softcap, std::optional<std::vector<double>> sinks, int chunk, std::optional<std::vector<double>> alibi) -> std::string {
    backend::require_gpu("gpu_not_covered", false);  // coverage is the host's question
    return backend::not_covered(backend::Backend::gpu, make_problem(q, k, v, causal, window, softmax_scale, rows, {softcap, sinks, chunk, alibi}),
                                recipe_arg(recipe));
  }, "q"_a, "k"_a, "v"_a, "recipe"_a, nb::kw_only(), "causal"_a = false, "window"_a = 0, "softmax_scale"_a = 0.0, "rows"_a = nb::none(),
        "softcap"_a = 0.0, "sinks"_a = nb::none(), "chunk"_a = 0, "alibi"_a = nb::none(),
        "Why no GPU kernel covers the recipe on this problem ('' when one does).");
  m.def("gpu_run", [](const ArrayArg& q, const ArrayArg& k, const ArrayArg& v, const nb::handle& recipe, bool causal, int window,
                      double softmax_scale, const nb::handle& rows, double softcap, std::optional<std::vector<double>> sinks, int chunk, std::optional<std::vector<double>> alibi) {
    backend::require_gpu("gpu_run");
    const Problem p = make_problem(q, k, v, causal, window, softmax_scale, rows, {softcap, sinks, chunk, alibi});
    const Recipe r = recipe_arg(recipe);
    const std::string reason = backend::not_covered(backend::Backend::gpu, p, r);
    if (!reason.empty()) throw std::invalid_argument("gpu_run: no GPU kernel covers the recipe: " + reason);
    backend::Output g;
    {
      nb::gil_scoped_release release;
      g = backend::run(backend::Backend::gpu, p, r);
    }
    nb::dict d;
    d["rows"] = rows_array(p.rows.resolve(p.q.tokens));
    d["out"] = to_numpy(std::move(g.out));
    d["kernel"] = g.kernel;
    return d;
  }, "q"_a, "k"_a, "v"_a, "recipe"_a, nb::kw_only(), "causal"_a = false, "window"_a = 0, "softmax_scale"_a = 0.0, "rows"_a = nb::none(),
        "softcap"_a = 0.0, "sinks"_a = nb::none(), "chunk"_a = 0, "alibi"_a = nb::none(),
        "Run the recipe on the first GPU family that covers it. Returns {'rows', 'out' [Hq, R, d] float32, 'kernel'}.");

  // ---- metrics and statistics ----
  m.def("compare", [](const ArrayArg& ref, const ArrayArg& x) {
    const AnyArray ra = array_of(ref, "ref"), xa = array_of(x, "x");
    // Shapes first: a mismatch is refused before either array is copied.
    bool same = ra.ndim() == xa.ndim();
    for (std::size_t i = 0; same && i < ra.ndim(); ++i) same = ra.shape(i) == xa.shape(i);
    if (!same) throw std::invalid_argument("compare: ref and x have different shapes; expected equal (nothing is broadcast)");
    if (element_count(ra, "ref") == 0) throw std::invalid_argument("compare: ref and x are empty; expected at least one value");
    require_memory("ref, x (as float64)", checked_sum("ref, x", {checked_product("ref", {8, element_count(ra, "ref")}),
                                                                checked_product("x", {8, element_count(xa, "x")})}));
    std::vector<std::size_t> sr, sx;
    const std::vector<double> r = to_doubles(ra, "ref", &sr), y = to_doubles(xa, "x", &sx);
    return metrics_dict(compare(r, y));
  }, "ref"_a, "x"_a, "Error metrics of x against ref, in float64: sqnr_db, rel_l2, rel_l1, cosine, max_abs, count.");
  m.def("row_divergence", [](const ArrayArg& p_ref, const ArrayArg& p, double floor, bool sink_outcome) {
    // Lengths and the floor first: a mismatch is refused before either row is copied.
    const AnyArray ra = array_of(p_ref, "p_ref"), pa = array_of(p, "p");
    if (element_count(ra, "p_ref") != element_count(pa, "p")) {
      throw std::invalid_argument("row_divergence: p_ref and p have different lengths (" + std::to_string(element_count(ra, "p_ref")) + " and " +
                                  std::to_string(element_count(pa, "p")) + "); expected one probability row of equal length");
    }
    if (!(floor > 0 && floor <= 1)) throw std::invalid_argument("row_divergence: floor = " + std::to_string(floor) + "; expected a probability in (0, 1]");
    const std::vector<double> a = to_doubles(ra, "p_ref"), b = to_doubles(pa, "p");
    require_probabilities(a, "row_divergence", "p_ref");
    require_probabilities(b, "row_divergence", "p");
    const RowDivergence d = row_divergence(a, b, floor, sink_outcome);
    nb::dict out;
    out["kl"] = d.kl;
    out["total_variation"] = d.total_variation;
    return out;
  }, "p_ref"_a, "p"_a, "floor"_a = kKlFloor, "sink_outcome"_a = false,
        "KL(p_ref || p) in nats (each flushed entry's term capped by the floor) and total variation of two probability rows; with "
        "sink_outcome, each row's missing mass (1 - sum: a sink logit's) is one more outcome.");
  m.def("mass_per_decade", [](const ArrayArg& p) {
    const std::vector<double> row = to_doubles(p, "p");
    require_probabilities(row, "mass_per_decade", "p");
    const auto b = mass_per_decade(row);
    return rows_array(std::vector<double>(b.begin(), b.end()));
  }, "p"_a, "Fraction of a probability row's mass per decade: [1e-1, 1], [1e-2, 1e-1), ..., [1e-8, 1e-7), below 1e-8.");
  m.def("mass_flushed", [](const ArrayArg& p, double threshold) {
    const std::vector<double> row = to_doubles(p, "p");
    require_probabilities(row, "mass_flushed", "p");
    if (!(threshold >= 0 && threshold <= 1)) throw std::invalid_argument("mass_flushed: threshold = " + std::to_string(threshold) + "; expected p / max(p) in [0, 1]");
    return mass_flushed(row, threshold);
  }, "p"_a, "threshold"_a,
        "Fraction of the row's mass on keys with p / max(p) <= threshold (int8 P at 127: 0.5/127).");
  m.def("p_flush_threshold", [](const std::string& spec) {
    const std::optional<double> t = static_p_flush_threshold(operand_from_string(spec, "p_flush_threshold: spec"));
    if (!t) throw std::invalid_argument("p_flush_threshold: '" + spec + "'; expected a static P spec such as int8/static:127");
    return *t;
  }, "spec"_a, "p / max(p) at or below which a static P format flushes to zero (e.g. 'int8/static:127' -> 0.5/127).");
  m.def("channel_outliers", [](const ArrayArg& t, int head, int tokens, bool subtract_mean) {
    const TensorF x = to_tensor(t, "t");
    if (head < 0 || head >= x.heads) throw std::invalid_argument("channel_outliers: head " + std::to_string(head) + " outside 0.." + std::to_string(x.heads - 1));
    if (tokens < 0 || tokens > x.tokens) throw std::invalid_argument("channel_outliers: tokens " + std::to_string(tokens) + " outside 0.." + std::to_string(x.tokens));
    for (int n = 0; n < (tokens > 0 ? tokens : x.tokens); ++n)
      for (int ch = 0; ch < x.dim; ++ch)
        if (!std::isfinite(x(head, n, ch))) {
          throw std::invalid_argument("channel_outliers: t[" + std::to_string(head) + ", " + std::to_string(n) + ", " + std::to_string(ch) +
                                      "] is " + (std::isnan(x(head, n, ch)) ? "NaN" : "Inf") + "; expected finite values");
        }
    const ChannelOutliers c = channel_outliers(x, head, tokens, subtract_mean);
    nb::dict d;
    d["absmax"] = rows_array(std::vector<double>(c.absmax));
    d["median"] = c.median;
    d["max"] = c.max;
    d["max_channel"] = c.max_channel;
    d["ratio"] = c.ratio;
    d["int8_levels_median"] = c.int8_levels_median;
    return d;
  }, "t"_a, "head"_a, "tokens"_a = 0, "subtract_mean"_a = false,
        "Per-channel absmax of one head over the first tokens (0 = all), against the median channel; with subtract_mean, after K smoothing.");

  // ---- dumps and outputs ----
  m.def("open_dump", [](const std::string& path) {
    const DatasetInfo info = open_dataset(path);
    nb::dict attrs;
    for (const auto& [k, v] : info.attrs) attrs[k.c_str()] = attr_to_py(v);
    nb::list layers;
    for (const LayerInfo& l : info.layers) {
      nb::dict d;
      d["name"] = l.name;
      d["q_heads"] = l.q_heads;
      d["kv_heads"] = l.kv_heads;
      d["tokens"] = l.tokens;
      d["dim"] = l.dim;
      d["v_dim"] = l.v_dim;
      d["dtype"] = name_of(l.dtype);
      d["causal"] = l.causal;
      d["sliding_window"] = l.sliding_window;
      d["softmax_scale"] = l.softmax_scale;
      d["rope"] = l.rope;
      d["softcap"] = l.softcap;
      d["sinks"] = l.sinks.empty() ? nb::none() : nb::cast(l.sinks);
      d["attention_chunk"] = l.chunk;
      d["alibi_slopes"] = l.alibi.empty() ? nb::none() : nb::cast(l.alibi);
      layers.append(d);
    }
    nb::dict d;
    d["path"] = info.path;
    d["attrs"] = attrs;
    d["layers"] = layers;
    d["n_tokens"] = info.n_tokens;
    return d;
  }, "path"_a, "Validate a dump (schema qattn-dump/1 or /2) and describe it: attrs, layers (shapes, dtype, causal, sliding_window, softmax_scale, "
        "rope, softcap, sinks, attention_chunk, alibi_slopes), n_tokens.");
  m.def("load_layer", [](const std::string& path, const nb::handle& layer_arg, std::vector<int> heads, int tokens) {
    // A layer by name ("15") or by number (15), as score and the reports take it.
    const std::string layer = nb::isinstance<nb::int_>(layer_arg) && !nb::isinstance<nb::bool_>(layer_arg)
                                  ? std::to_string(int_arg(layer_arg, "layer", 0, kMaxDimension, "a layer name or a non-negative integer"))
                                  : str_arg(layer_arg, "layer", "a layer name (str) or a non-negative integer");
    const DatasetInfo info = open_dataset(path);
    SliceRequest req;
    req.heads = heads;
    req.tokens = tokens;
    LayerSlice s = load_layer(info, layer, req);
    nb::dict d;
    d["q"] = to_numpy(std::move(s.problem.q));
    d["k"] = to_numpy(std::move(s.problem.k));
    d["v"] = to_numpy(std::move(s.problem.v));
    d["causal"] = s.problem.causal;
    d["window"] = s.problem.window;
    d["softmax_scale"] = s.problem.softmax_scale;
    d["softcap"] = s.problem.softcap;
    d["sinks"] = s.problem.sinks.empty() ? nb::none() : nb::cast(s.problem.sinks);
    d["chunk"] = s.problem.chunk;
    d["alibi"] = s.problem.alibi.empty() ? nb::none() : nb::cast(s.problem.alibi);
    d["q_heads"] = s.q_heads;
    d["kv_heads"] = s.kv_heads;
    return d;
  }, "path"_a, "layer"_a, "heads"_a = std::vector<int>{}, "tokens"_a = 0,
        "Q/K/V (float32 [H, N, d]) of one layer's first tokens (0 = all) and its causal, window, softmax_scale, softcap, sinks "
        "(None, or one per returned query head), chunk and alibi (as sinks). With heads, K/V hold "
        "one KV head per chosen query head.");
  m.def("write_dump", [](const std::string& path, const nb::list& layers, const nb::dict& attrs, const std::string& dtype,
                         std::optional<std::vector<int>> tokens) {
    std::vector<LayerToWrite> ls;
    for (std::size_t i = 0; i < nb::len(layers); ++i) {
      const nb::dict l = nb::cast<nb::dict>(layers[i]);
      const std::string where = "layers[" + std::to_string(i) + "]";
      for (const char* key : {"name", "q", "k", "v"})
        if (!l.contains(key)) throw std::invalid_argument(where + ": missing '" + key + "'; expected name, q, k, v (and optional causal, sliding_window, softmax_scale, rope, softcap, sinks, attention_chunk, alibi_slopes)");
      LayerToWrite w;
      w.name = str_arg(l["name"], where + ".name", "a layer name (str)");
      w.q = to_tensor(ArrayArg{l["q"]}, where + ".q");
      w.k = to_tensor(ArrayArg{l["k"]}, where + ".k");
      w.v = to_tensor(ArrayArg{l["v"]}, where + ".v");
      if (l.contains("causal")) w.causal = bool_arg(l["causal"], where + ".causal");
      if (l.contains("sliding_window")) {
        w.sliding_window = static_cast<int>(int_arg(l["sliding_window"], where + ".sliding_window", 0, kMaxDimension, "0 (none) or a positive token count"));
      }
      if (l.contains("softmax_scale")) w.softmax_scale = float_arg(l["softmax_scale"], where + ".softmax_scale", "a positive finite number (0: 1/sqrt(d))");
      if (w.softmax_scale == 0) w.softmax_scale = 1.0 / std::sqrt(static_cast<double>(w.q.dim));
      if (l.contains("rope")) w.rope = str_arg(l["rope"], where + ".rope", "a string naming the position encoding");
      if (l.contains("attention_chunk")) {
        w.chunk = static_cast<int>(int_arg(l["attention_chunk"], where + ".attention_chunk", 0, kMaxDimension, "0 (none) or a positive token count"));
      }
      if (l.contains("softcap")) w.softcap = float_arg(l["softcap"], where + ".softcap", "a positive finite number (0: none)");
      for (const auto& [key, values] : {std::pair{"sinks", &w.sinks}, std::pair{"alibi_slopes", &w.alibi}}) {
        if (!l.contains(key) || l[key].is_none()) continue;
        const nb::handle given = l[key];
        for (std::size_t h = 0; h < nb::len(given); ++h) {
          values->push_back(float_arg(given[h], where + "." + key + "[" + std::to_string(h) + "]", "a finite value per query head"));
        }
      }
      ls.push_back(std::move(w));
    }
    write_dataset(path, attrs_from_py(attrs), ls, parse_format(dtype, "write_dump: dtype"), tokens);
  }, "path"_a, "layers"_a, "attrs"_a, "dtype"_a = "fp16", "tokens"_a = nb::none(),
        "Write a dump (schema qattn-dump/1, or /2 with softcap or sinks) atomically. layers: dicts with name, q, k, v and optional causal, "
        "sliding_window, softmax_scale, rope, softcap, sinks and alibi_slopes (one per query head), attention_chunk; attrs: the root attributes (schema, model, weights, text_source, n_tokens, created_by, created_at).");
  m.def("read_outputs", [](const std::string& path) {
    OutputsFile f = read_outputs(path);
    nb::list layers;
    for (LayerOutputs& l : f.layers) {
      nb::dict d;
      d["layer"] = l.layer;
      d["context"] = l.context;
      d["rows"] = l.rows_listed ? rows_array(std::vector<int>(l.rows)) : nb::none();
      d["o"] = to_numpy(std::move(l.o));
      layers.append(d);
    }
    nb::dict d;
    d["kernel"] = f.kernel;
    d["recipe"] = f.recipe;
    nb::dict attrs;
    for (const auto& [k, v] : f.attrs) attrs[k.c_str()] = attr_to_py(v);
    d["attrs"] = attrs;
    d["layers"] = layers;
    return d;
  }, "path"_a, "Read and validate an outputs file (schema qattn-outputs/1).");
  m.def("write_outputs", [](const std::string& path, const std::string& kernel, const nb::list& layers, const std::string& recipe,
                            const std::string& dtype, const nb::dict& attrs) {
    OutputsFile f;
    f.kernel = kernel;
    if (!recipe.empty()) f.recipe = to_string(recipe_from_string(recipe));
    f.attrs = attrs_from_py(attrs);
    for (std::size_t i = 0; i < nb::len(layers); ++i) {
      const nb::dict l = nb::cast<nb::dict>(layers[i]);
      const std::string where = "layers[" + std::to_string(i) + "]";
      if (!l.contains("layer") || !l.contains("o")) throw std::invalid_argument(where + ": expected 'layer' and 'o' (and optional 'rows', 'context')");
      LayerOutputs lo;
      // A layer by name ("15") or by number (15), as reports store it.
      if (nb::isinstance<nb::int_>(l["layer"])) {
        const long long n = nb::cast<long long>(l["layer"]);
        if (n < 0) throw std::invalid_argument(where + ".layer: " + std::to_string(n) + " is negative; expected a layer name or a non-negative integer");
        lo.layer = std::to_string(n);
      } else {
        lo.layer = str_arg(l["layer"], where + ".layer", "a layer name (str) or a non-negative integer");
      }
      lo.o = to_tensor(ArrayArg{l["o"]}, where + ".o");
      for (std::size_t j = 0; j < lo.o.size(); ++j)
        if (!std::isfinite(lo.o.data[j])) throw std::invalid_argument(where + ".o: element " + std::to_string(j) + " is not finite; the kernel must write finite outputs");
      if (l.contains("rows") && !l["rows"].is_none()) {
        const RowSelection rs = parse_rows(l["rows"]);
        lo.rows = rs.kind == RowSelection::Kind::list ? rs.listed : rs.resolve(lo.o.tokens);
        lo.rows_listed = true;
      } else {
        for (int r = 0; r < lo.o.tokens; ++r) lo.rows.push_back(r);
      }
      if (static_cast<int>(lo.rows.size()) != lo.o.tokens) {
        throw std::invalid_argument(where + ": o has " + std::to_string(lo.o.tokens) + " rows but rows names " + std::to_string(lo.rows.size()) + "; expected one index per output row");
      }
      if (l.contains("context") && !l["context"].is_none()) {
        lo.context = static_cast<int>(int_arg(l["context"], where + ".context", 1, kMaxDimension, "a positive token count (or None)"));
      }
      f.layers.push_back(std::move(lo));
    }
    write_outputs(path, f, parse_format(dtype, "write_outputs: dtype"));
  }, "path"_a, "kernel"_a, "layers"_a, "recipe"_a = "", "dtype"_a = "fp32", "attrs"_a = nb::dict(),
        "Write an outputs file (schema qattn-outputs/1) atomically. layers: dicts with 'layer', 'o' [Hq, R, d] and optional 'rows' "
        "(the R query rows) and 'context' (tokens the kernel saw).");

  // ---- scoring and bounds ----
  m.def("score_files", [](const std::string& dump, std::vector<std::string> outputs, const std::string& output, const std::string& recipe,
                          bool force, bool quiet, bool progress) {
    ScoreOptions o;
    o.dataset = dump;
    o.outputs = std::move(outputs);
    o.output = output;
    o.recipe = recipe;
    o.force = force;
    o.quiet = quiet;
    o.progress = progress;
    o.command_line = "qattn.score_files(" + dump + ", ... -> " + output + ")";
    o.between_units = interrupt_check;
    std::vector<nlohmann::json> rows;
    {
      nb::gil_scoped_release release;
      rows = score_outputs(o);
    }
    nb::list out;
    for (const nlohmann::json& r : rows) out.append(py_from_json(r));
    return out;
  }, "dump"_a, "outputs"_a, "output"_a, "recipe"_a = "", "force"_a = false, "quiet"_a = true, "progress"_a = false,
        "What `qattn score` does: score outputs files against the dump's float64 reference and the recipe's emulation into a report folder. "
        "quiet: no summary on stdout; progress: each unit and the ETA on stderr. Returns the report's rows (results.jsonl's, as dicts).");
  nb::class_<report::FolderLock>(m, "ReportFolder", "A report folder held by this process (its lock, shared with the score_files calls inside).")
      .def("__enter__", [](report::FolderLock& l) -> report::FolderLock& { return l; }, nb::rv_policy::reference)
      .def("__exit__", [](nb::handle self, nb::args) { nb::inst_destruct(self); return false; },
           "Release the folder's lock.");
  m.def("claim_report_for", [](const std::string& path, const std::string& command, bool force, bool resume, bool resumable) {
    return report::claim_for(path, report::existing_for(command, force, resume, report::kPythonFlags), resumable, report::kPythonFlags).release();
  }, "path"_a, "command"_a, "force"_a, "resume"_a, "resumable"_a = true, nb::rv_policy::take_ownership,
        "Claim PATH for COMMAND as the library's commands do: force replaces the report's own files, resume completes it, neither "
        "refuses an existing folder (both together are an error). Use as a context manager.");
  m.def("fit_files", [](const std::string& dump, std::vector<std::string> outputs, const std::string& output, const std::string& start, int rows,
                        std::uint64_t seed, double budget, double min_gain, int top, int beam, bool force, bool resume, bool quiet) {
    FitOptions o;
    o.dataset = dump;
    o.outputs = std::move(outputs);
    o.output = output;
    o.start = start;
    o.rows = rows;
    o.seed = seed;
    o.budget_s = budget;
    o.min_gain_db = min_gain;
    o.top = top;
    o.beam = beam;
    o.force = force;
    o.resume = resume;
    o.quiet = quiet;
    o.command_line = "qattn.fit(" + dump + ", ... -> " + output + ")";
    o.between_evaluations = interrupt_check;
    FitResult r;
    {
      nb::gil_scoped_release release;
      r = fit_recipe(o);
    }
    const auto steps = [](const std::vector<FitStep>& v) {
      nb::list l;
      for (const FitStep& s : v) {
        nb::dict d;
        d["knob"] = s.knob;
        d["line"] = s.line;
        d["kernel_vs_recipe_db"] = s.kernel_vs_recipe_db;
        d["recipe_vs_float64_db"] = s.recipe_vs_float64_db;
        l.append(d);
      }
      return l;
    };
    nb::dict d;
    d["best"] = r.path.back().line;
    d["meets_rule"] = r.meets_rule;
    d["floor_db"] = r.floor_db;
    d["at_floor"] = r.at_floor;
    d["path"] = steps(r.path);
    d["ranked"] = steps(r.ranked);
    d["evaluated"] = r.evaluated;
    d["budget_spent"] = r.budget_spent;
    d["seconds"] = r.seconds;
    d["skipped"] = r.skipped;
    d["skipped_why"] = r.skipped_why;
    return d;
  }, "dump"_a, "outputs"_a, "output"_a, "start"_a = "", "rows"_a = 32, "seed"_a = 1, "budget"_a = 600.0, "min_gain"_a = 0.05, "top"_a = 10,
        "beam"_a = 3, "force"_a = false, "resume"_a = false, "quiet"_a = true,
        "What `qattn fit` does: the recipe nearest a kernel's outputs files on a dump, by a greedy search over single-knob moves. Returns "
        "{'best', 'meets_rule', 'floor_db' (the emulator's own summation-order floor at the best recipe), 'at_floor' (the best's remaining "
        "distance sits there), 'path' (the knobs that moved the distance), 'ranked', 'evaluated', 'budget_spent', 'seconds', "
        "'skipped' (recipes the search made that do not apply to the input), 'skipped_why'}; an SQNR of float('inf') means bit-equal.");
  // The report folder's habits for Python writers of reports (qattn.model_eval): one implementation.
  m.def("write_atomic", [](const std::string& path, const nb::bytes& data) {
    const std::string text(data.c_str(), data.size());
    nb::gil_scoped_release release;
    report::write_atomic(path, text);
  }, "path"_a, "data"_a, "Write a whole file through a temporary and a rename (never through a planted link), made durable.");
  m.def("git_commit", &report::git_commit, "folder"_a = ".", "The commit of the git checkout holding folder ('unknown' outside one).");
  m.def("now_utc", &report::now_utc, "The time as reports record it (UTC, ISO 8601).");
  m.def("cost_shares", [](const std::vector<double>& costs, int size) { return ranks::cost_shares(costs, size); }, "costs"_a, "size"_a,
        "Each work item's rank when `size` ranks share items of these costs: contiguous runs of about equal cost (as `qattn run` shares units).");
  nb::class_<Progress>(m, "Progress", "Units done and an ETA on stderr, as `qattn run` shows them (a line per unit off a terminal).")
      .def(nb::init<double, std::size_t, bool>(), "total_cost"_a, "units"_a, "quiet"_a = false)
      .def("step", &Progress::step, "what"_a, "cost"_a, "One unit done: its description and its share of total_cost.");
  m.def("check", [](const std::string& bounds, bool update) {
    nb::gil_scoped_release release;
    return check_bounds(bounds, update);
  }, "bounds"_a, "update"_a = false, "What `qattn check` does: the number of violated bounds (0 = pass).");
}
