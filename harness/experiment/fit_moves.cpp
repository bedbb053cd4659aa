#include "harness/experiment/fit_moves.hpp"

#include <exception>
#include <map>
#include <set>

#include "harness/io/recipe_io.hpp"
#include "kernels/formats/registry.hpp"
#include "kernels/numerics/accumulator.hpp"

namespace qattn {

namespace {

using Keys = std::map<std::string, std::string>;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (true) {
    const std::size_t j = s.find(sep, i);
    out.push_back(s.substr(i, j == std::string::npos ? std::string::npos : j - i));
    if (j == std::string::npos) return out;
    i = j + 1;
  }
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : "/") + p;
  return s;
}

std::string line_of(const Keys& keys) {
  std::string s;
  for (const auto& [k, v] : keys) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

bool is_granularity(const std::string& part) {
  const std::string head = part.substr(0, part.find(':'));
  return head == "tensor" || head == "head" || head == "token" || head == "channel" || head == "block" || head == "group" ||
         head == "kvhead" || head == "thread";
}

// The values one operand's text can move to, one knob at a time.
std::vector<std::string> operand_variants(const std::string& text, bool is_p) {
  std::vector<std::string> out;
  std::vector<std::string> parts = split(text, '/');
  const bool scaled = parts.size() > 1;
  if (is_p) {
    for (const char* v : {"fp32", "fp16", "bf16", "e4m3/static:448", "e4m3/static:256", "e4m3/static:447.8898", "int8/static:127"}) out.emplace_back(v);
    return out;
  }
  // The element format: a float format bare (plain rounding) or with the current scale rule; an
  // integer format keeps the scale rule (or takes per-token scales).
  for (const char* f : {"fp32", "bf16", "fp16", "e4m3", "e5m2", "int8", "int4"}) {
    const bool integer = std::string(f) == "int8" || std::string(f) == "int4";
    if (!integer) out.emplace_back(f);
    std::vector<std::string> p = parts;
    p[0] = f;
    if (p.size() == 1) p.emplace_back("token");
    out.push_back(join(p));
  }
  if (!scaled) return out;
  std::size_t g = 0;
  for (std::size_t i = 1; i < parts.size(); ++i)
    if (is_granularity(parts[i])) g = i;
  if (g > 0) {
    for (const char* gran : {"tensor", "kvhead", "head", "token", "channel", "block:16", "block:32", "block:64", "block:128", "group:32",
                            // a lane's rows of an m16 fragment (one or two per warp), its keys of a 64- or 128-key tile
                            "thread:16:8:1", "thread:32:8:1", "thread:64:8:2", "thread:128:8:2"}) {
      std::vector<std::string> p = parts;
      p[g] = gran;
      out.push_back(join(p));
    }
  }
  // Each modifier on or off: scales stored in fp16, a true division (rounded to fp16, or fp32), the
  // absmax scale as a multiply by 1/max, ties away from zero, 1e-7 added to each scale (SageAttention 2).
  for (const std::string mod : {"scale:fp16", "div:fp16", "div:fp32", "amax:mul", "round:away", "eps:1e-07"}) {
    const std::string head = mod.substr(0, mod.find(':'));
    std::vector<std::string> p;
    bool had = false;
    for (const std::string& x : parts) {
      if (x.substr(0, x.find(':')) == head) had = true;
      else p.push_back(x);
    }
    if (!had) p.push_back(mod);
    out.push_back(join(p));
  }
  return out;
}

}  // namespace

std::vector<FitMove> fit_moves(const Recipe& r) {
  Keys keys;
  const nlohmann::json canonical = to_json(r);
  for (const auto& [k, v] : canonical.items()) keys[k] = v.get<std::string>();
  std::vector<FitMove> moves;
  // A move is kept once per recipe: by its canonical text where it parses (a key set to its default
  // is no move), else by its own text (the caller reports why it does not parse).
  const auto canonical_of = [](const std::string& line) {
    try {
      return to_string(recipe_from_string(line));
    } catch (const std::exception&) {
      return line;
    }
  };
  std::set<std::string> seen = {to_string(r)};
  const auto add = [&](const std::string& knob, const Keys& changed, bool restart = false) {
    const std::string line = line_of(changed);
    if (seen.insert(canonical_of(line)).second) moves.push_back({knob, line, restart});
  };
  const auto set = [&](const std::string& key, const std::string& value) {
    Keys k = keys;
    const auto it = k.find(key);
    const std::string before = it == k.end() ? "(default)" : it->second;
    if (before == value) return;
    k[key] = value;
    add(key + ": " + before + " -> " + value, k);
  };
  for (const char* op : {"q", "k", "v", "p"})
    for (const std::string& v : operand_variants(keys.at(op), std::string(op) == "p")) set(op, v);
  // Q and K together: Q K^T takes two integer or two float operands, so a change of number family
  // (int8 to fp16, say) is one move on both.
  for (const std::string& v : operand_variants(keys.at("q"), false)) {
    Keys k = keys;
    k["q"] = k["k"] = v;
    add("q, k: " + keys.at("q") + ", " + keys.at("k") + " -> " + v, k);
  }
  for (const char* v : {"none", "global"}) set("ksmooth", v);
  if (r.k_smoothing != KSmoothing::none)
    for (const char* v : {"fp32", "fp16"}) set("ksmooth.format", v);
  for (const char* v : {"0", "1"}) set("qprescale", v);
  for (const char* v : {"joint", "sequential"}) set("qkscale", v);
  for (const char* v : {"quantized", "float"}) set("denominator", v);
  for (const char* v : {"none", "zero"}) set("pad", v);
  if (!r.k.unit_scale && r.k.spec.format == FormatId::int4 && r.k.spec.granularity == Granularity::group && r.q.spec.granularity == Granularity::group)
    for (const char* v : {"codes", "qsum"}) set("kzero", v);
  if (r.split_k == 1 && r.softmax == SoftmaxKind::float_online)
    for (const char* v : {"forward", "reverse"}) set("order", v);
  for (const char* v : {"fp32", "fp16", "bf16"}) set("out", v);
  for (const char* v : {"32x32", "64x64", "64x128", "128x32", "128x64", "128x128", "fa3_sm90"}) set("tiles", v);
  for (const char* acc : {"acc.qk", "acc.pv"}) {
    for (const char* v : {"exact", "fp32", "fp16", "fp16fma"}) set(acc, v);
    for (const NamedAccumulator& n : kNamedAccumulators) set(acc, n.name);
  }
  if (r.softmax == SoftmaxKind::qflash_integer) {
    // The integer softmax's constants and rules: the lab's reading of the paper or the published kernel's.
    const std::pair<const char*, const char*> knobs[] = {{"qflash.consts", "kernel"}, {"qflash.exp", "fixed16"},   {"qflash.requant", "round16"},
                                                         {"qflash.release", "shift30"}, {"qflash.start", "kernel"}, {"qflash.tail", "pad"},
                                                         {"qflash.div", "trunc32"}};
    for (const auto& [key, other] : knobs) set(key, keys.at(key) == "lab" ? other : "lab");
    Keys k = keys;
    k["softmax"] = "float";
    for (const auto& [key, other] : knobs) (void)other, k.erase(key);
    add("softmax: qflash -> float", k, true);
  } else {
    // QFlash's integer softmax takes int8 per-tensor Q, K and V and int8 P at 127, summed exactly.
    Keys k = keys;
    k["softmax"] = "qflash";
    for (const char* op : {"q", "k", "v"}) k[op] = "int8/tensor";
    k["p"] = "int8/static:127";
    k["acc.qk"] = k["acc.pv"] = "exact";
    add("softmax: float -> qflash (int8/tensor Q K V, int8 P at 127, exact sums)", k, true);
  }
  return moves;
}

}  // namespace qattn
