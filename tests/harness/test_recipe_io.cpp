// The recipe's one-line and JSON forms: round trips, defaults, and one clear error per mistake.
#include "harness/io/recipe_io.hpp"
#include "kernels/numerics/accumulator.hpp"
#include "kernels/recipe/knobs.hpp"  // validate
#include "tests/catch.hpp"
#include "tests/error_text.hpp"

using namespace qattn;

namespace {
bool has(const std::string& msg, const std::string& part) {
  if (msg.find(part) != std::string::npos) return true;
  UNSCOPED_INFO("message: " << msg);
  return false;
}
std::string parse_error(const std::string& line) {
  return error_text([&] { (void)recipe_from_string(line); });
}
}  // namespace

TEST_CASE("one-line recipes parse to the fields they name", "[recipe]") {
  const Recipe r = recipe_from_string(
      "q=int8/token k=int8/block:64/scale:fp16 ksmooth=global p=e4m3/static:448 v=e4m3/channel "
      "acc.qk=exact acc.pv=mma(chunk=32,align=26,chunk_bits=13,chunk_round=zero,acc_bits=13,add_round=zero,flush=4) "
      "tiles=128x32 split=4 tau=8 denominator=float rotation=hadamard");
  CHECK(r.q.spec.format == FormatId::int8);
  CHECK(r.q.spec.granularity == Granularity::token);
  CHECK_FALSE(r.q.unit_scale);
  CHECK(r.k.spec.granularity == Granularity::block);
  CHECK(r.k.spec.block == 64);
  CHECK(r.k.spec.scale_format == FormatId::fp16);
  CHECK(r.k_smoothing == KSmoothing::global_mean);
  CHECK(r.p.spec.rule == ScaleRule::static_multiplier);
  CHECK(r.p.spec.multiplier == 448);
  CHECK(r.v.spec.granularity == Granularity::channel);
  CHECK(r.qk_acc.kind == Accumulator::Kind::exact);
  CHECK(r.pv_acc.kind == Accumulator::Kind::mma);
  CHECK(r.pv_acc.align_bits == 26);
  CHECK(r.pv_acc.chunk_rounding == Rounding::toward_zero);
  CHECK(r.pv_acc.flush_every == 4);
  CHECK(r.tiles.block_q == 128);
  CHECK(r.tiles.block_k == 32);
  CHECK(r.split_k == 4);
  CHECK(r.lazy_rescale_tau == 8);
  CHECK(r.denominator == Denominator::float_p);
  CHECK(r.rotation == Rotation::hadamard);
}

TEST_CASE("recipe text: measured accumulator presets and the fused flag round-trip", "[recipe]") {
  const Recipe r = recipe_from_string("q=fp16 k=fp16 p=e4m3/static:448 v=e4m3 acc.qk=h200_hmma acc.pv=h200_e4m3_mma");
  CHECK(r.qk_acc.fused);
  CHECK(r.pv_acc.flush_every == 2);
  CHECK(r.pv_acc.align_bits == 26);
  const std::string text = to_string(r);
  CHECK(has(text, "acc.qk=h200_hmma acc.pv=h200_e4m3_mma "));  // presets print by name
  const Recipe back = recipe_from_string(text);
  CHECK(back.pv_acc.fused);
  CHECK(back.pv_acc.chunk == 16);
  CHECK(to_string(back) == text);
  // A model that is no preset prints its fields, the fused flag and factor_emin among them.
  const std::string spelled = to_string(recipe_from_string("acc.qk=mma(chunk=16,align=26,chunk_bits=23,chunk_round=zero,fused=1,factor_emin=-14,flush=3)"));
  CHECK(has(spelled, "fused=1"));
  CHECK(has(spelled, "factor_emin=-14"));
  CHECK(recipe_from_string(spelled).qk_acc.factor_exponent_min == -14);
  CHECK(to_string(recipe_from_string(spelled)) == spelled);
  CHECK(has(parse_error("acc.pv=mma(chunk=16,fused=2)"), "fused"));
  // The HMMA reads subnormal fp16 factors at exponent -14: the preset says so, and the text keeps it.
  CHECK(r.qk_acc.factor_exponent_min == -14);
  CHECK(back.qk_acc.factor_exponent_min == -14);
  CHECK(has(parse_error("acc.pv=mma(chunk=16,factor_emin=-14)"), "acc.pv.factor_exponent_min"));
  CHECK(has(parse_error("acc.pv=mma(chunk=16,fused=1,factor_emin=3)"), "expected -1022..0"));
  CHECK(has(parse_error("acc.pv=mma(chunk=16,fused=1,factor_emin=-2000)"), "expected -1022..0, got -2000"));  // the default is not spelled
}

TEST_CASE("recipe text: the bf16 wgmma presets are the HMMA model reading subnormal factors at -126", "[recipe]") {
  const Recipe r = recipe_from_string("q=bf16 k=bf16 p=bf16 v=bf16 acc.qk=h200_wgmma_bf16 acc.pv=h200_wgmma_bf16_tile");
  CHECK(r.qk_acc.fused);
  CHECK(r.qk_acc.chunk == 16);
  CHECK(r.qk_acc.align_bits == 26);
  CHECK(r.qk_acc.chunk_mantissa_bits == 23);
  CHECK(r.qk_acc.flush_every == 0);
  CHECK(r.qk_acc.factor_exponent_min == -126);
  CHECK(r.pv_acc.flush_every == 4);
  CHECK(r.pv_acc.factor_exponent_min == -126);
  const std::string text = to_string(r);
  CHECK(has(text, "acc.qk=h200_wgmma_bf16 acc.pv=h200_wgmma_bf16_tile "));
  CHECK(recipe_from_string(text).pv_acc.factor_exponent_min == -126);
  CHECK(to_string(recipe_from_string(text)) == text);
}

TEST_CASE("defaults: unquantized fp32 operands, fp32 accumulators, 64x64 tiles", "[recipe]") {
  const Recipe r = recipe_from_string("");
  CHECK(r.q.unit_scale);
  CHECK(r.q.spec.format == FormatId::fp32);
  CHECK(r.p.spec.format == FormatId::fp32);
  CHECK(r.pv_acc.kind == Accumulator::Kind::fp32);
  CHECK(r.tiles.block_k == 64);
  CHECK(to_string(r) == "q=fp32 k=fp32 p=fp32 v=fp32 ksmooth=none ksmooth_block=0 qsmooth=0 vsmooth=0 rotation=none "
                        "softmax=float denominator=quantized acc.qk=fp32 acc.pv=fp32 tiles=64x64 split=1 tau=0");
}

TEST_CASE("Recipe{} is the recipe of an empty line, and validates", "[recipe]") {
  const Recipe r{};
  CHECK(to_string(r) == to_string(recipe_from_string("")));
  CHECK_NOTHROW(validate(r));
}

TEST_CASE("every measured accumulator reads back by its name as its model", "[recipe]") {
  for (const NamedAccumulator& n : kNamedAccumulators) {
    INFO(n.name);
    const Recipe r = recipe_from_string(std::string("q=fp16 k=fp16 acc.qk=") + n.name);
    CHECK(to_string(r) == to_string(recipe_from_string("q=fp16 k=fp16 acc.qk=" + to_json(r)["acc.qk"].get<std::string>())));
    const Accumulator a = n.model();
    CHECK(r.qk_acc.chunk == a.chunk);
    CHECK(r.qk_acc.flush_every == a.flush_every);
    CHECK(r.qk_acc.factor_exponent_min == a.factor_exponent_min);
    CHECK(r.qk_acc.acc_mantissa_bits == a.acc_mantissa_bits);
  }
}

TEST_CASE("string and JSON forms round-trip", "[recipe]") {
  for (const char* line : {"q=bf16 k=bf16 p=bf16 v=bf16",
                           "q=bf16 k=bf16 p=bf16 v=bf16 tiles=fa3_sm90 order=reverse",
                           "q=int8/token k=int8/token ksmooth=global acc.qk=exact",
                           "q=int8/group:32/scale:fp16 k=int4/group:32/scale:fp16 acc.qk=exact p=int8/static:127 v=int8/block:32",
                           "q=int8/thread:16:8:1/amax:mul k=int8/thread:128:8:2/div/round:away/eps:1e-07 acc.qk=exact p=e4m3/static:448 v=e4m3/channel/max:2.25",
                           "q=int8/group:32/scale:fp16/codes:fp32 k=int4/group:32/scale:fp16/amax:signed acc.qk=exact v=int4/group:32/amax:signed",
                           "q=int8/group:32/round:away k=int4/group:32/scale:fp16/amax:signed acc.qk=exact kzero=qsum",
                           "q=fp16 k=fp16 v=fp16 acc.pv=fp16fma tiles=1x1 split=2 split.pad=256 split.min=512",
                           "q=e4m3/tensor k=e4m3/head p=e4m3fnuz/static:240 v=e5m2/channel/scale:e8m0 acc.pv=fp16 ksmooth=block_corrected ksmooth_block=16",
                           "q=fp16 k=fp16 p=e4m3/static:448 v=e4m3/channel acc.pv=mma(chunk=16,align=32,chunk_bits=13,chunk_round=even,acc_bits=13,add_round=zero,flush=0) split=8 tau=8"}) {
    INFO(line);
    const Recipe r = recipe_from_string(line);
    const std::string canonical = to_string(r);
    CHECK(to_string(recipe_from_string(canonical)) == canonical);
    CHECK(to_string(recipe_from_json(to_json(r))) == canonical);
    CHECK(to_string(recipe_from_json(nlohmann::json(line))) == canonical);  // a JSON string is a line
  }
}

TEST_CASE("a recipe prints a measured accumulator by its preset's name", "[recipe]") {
  // Spelled out or named, a preset's model prints as its name; any other mma(...) prints its fields.
  CHECK(has(to_string(recipe_from_string("acc.pv=h200_e4m3_wgmma_tile128 tiles=64x128")), "acc.pv=h200_e4m3_wgmma_tile128 "));
  Recipe r;
  r.qk_acc = h200_e4m3_wgmma_accumulator();  // as the fields of an mma(...) would give it
  CHECK(has(to_string(r), "acc.qk=h200_e4m3_wgmma "));
  r.qk_acc.flush_every = 3;
  CHECK(has(to_string(r), "acc.qk=mma(chunk=32,"));
  CHECK(has(to_string(r), "flush=3,"));
  CHECK(same_accumulator(recipe_from_string(to_string(r)).qk_acc, r.qk_acc));
  // Names and models are one to one, so a printed name reads back as the model it stood for.
  for (const NamedAccumulator& a : kNamedAccumulators)
    for (const NamedAccumulator& b : kNamedAccumulators) {
      INFO(a.name << " / " << b.name);
      CHECK(same_accumulator(a.model(), b.model()) == (std::string(a.name) == b.name));
    }
}

TEST_CASE("JSON operands may be objects", "[recipe]") {
  const auto j = nlohmann::json::parse(R"({"q": {"format": "int8", "granularity": "block", "block": 64},
                                           "k": {"format": "int8", "granularity": "block", "block": 64},
                                           "p": {"format": "e4m3", "static": 448}, "acc.qk": "exact", "split": 2})");
  const Recipe r = recipe_from_json(j);
  CHECK(operand_to_string(r.q) == "int8/block:64");
  const Recipe t = recipe_from_json(nlohmann::json::parse(R"({"q": {"format": "int8", "granularity": "thread", "block": 16, "period": 8, "width": 1},
                                                               "k": "int8/thread:128:8:2", "acc.qk": "exact"})"));
  CHECK(operand_to_string(t.q) == "int8/thread:16:8:1");
  CHECK(operand_to_string(recipe_from_json(nlohmann::json::parse(R"({"q": {"format": "int8", "granularity": "token", "divide": "fp32",
                                                                          "round_away": true, "eps": 1e-7}, "k": "int8/token"})")).q) ==
        "int8/token/div:fp32/round:away/eps:1e-07");
  CHECK(t.k.spec.block == 128);
  CHECK(t.k.spec.period == 8);
  CHECK(t.k.spec.width == 2);
  CHECK(operand_to_string(r.p) == "e4m3/static:448");
  CHECK(r.split_k == 2);
}

TEST_CASE("bad recipe text is one clear error naming the token or key", "[recipe][errors]") {
  CHECK(has(parse_error("q=int9/token"), "recipe string: token 'q=int9/token': unknown format 'int9'; expected one of: fp32"));
  CHECK(has(parse_error("q=int8"), "'int8': an integer format needs a granularity or a static scale, e.g. int8/token"));
  CHECK(has(parse_error("q=int8/block k=int8/block:4"), "'int8/block': block needs a size, e.g. block:32"));
  CHECK(has(parse_error("q=int8/row"), "unknown granularity or modifier 'row'; expected one of: tensor, head, token"));
  CHECK(has(parse_error("q=int8/token/amax:max k=int8/token"), "amax takes 'mul' (the scale as absmax x fp32(1/max)) or 'signed'"));
  CHECK(has(parse_error("q=int8/token/codes:fp16 k=int8/token"), "codes takes 'fp32'"));
  CHECK(has(parse_error("v=e4m3/channel/max:-1"), "'e4m3/channel/max:-1': max:-1; expected the positive value the absmax maps to"));
  CHECK(has(parse_error("q=int8/token/amax:signed/round:away k=int8/token"), "recipe field 'q.amax': amax:signed (q4_0's grid) needs"));
  CHECK(has(parse_error("q=int8/token/eps:2 k=int8/token"), "'int8/token/eps:2': eps:2; expected a number in (0, 1) added to each scale"));
  CHECK(has(parse_error("q=int8/thread:16 k=int8/token"), "'int8/thread:16': thread needs TILE:PERIOD:WIDTH"));
  CHECK(has(parse_error("q=int8/thread:16:5:1 k=int8/token"), "recipe field 'q.block': thread granularity needs TILE:PERIOD:WIDTH positive, the tile at most 4096 tokens, the period dividing the tile"));
  // A modifier the other choices would ignore is an error naming the operand's field.
  CHECK(has(parse_error("p=e4m3/static:448/round:away"), "recipe field 'p': P takes a format and a static multiplier only"));
  CHECK(has(parse_error("p=e4m3/static:448/scale:fp16"), "recipe field 'p': P takes a format and a static multiplier only"));
  CHECK(has(parse_error("v=e4m3/static:2/max:2"), "recipe field 'v.max': /amax, /max and /eps shape a scale from the absmax"));
  CHECK(has(parse_error("q=int8/token/div/codes:fp32 k=int8/token"), "recipe field 'q.codes': codes:fp32 multiplies"));
  CHECK(has(parse_error("k=int4/group:32/amax:signed/scale:e8m0 q=int8/group:32"), "recipe field 'k.amax': amax:signed keeps the scale's sign"));
  CHECK(has(parse_error("q=int8/group:32 k=int8/group:32 kzero=qsum"), "recipe field 'kzero': qsum takes int4 K (stored as codes + 8)"));
  CHECK(has(parse_error("q=int8/group:32 k=int4/group:32 ksmooth=global kzero=qsum"), "recipe field 'kzero': qsum takes int4 K"));
  CHECK(has(parse_error("split=2 split.min=512"), "recipe field 'split.min': a minimum cell count for splitting needs split.pad"));
  CHECK(has(parse_error("split.pad=-1"), "recipe field 'split.pad': expected 0..65536 cells"));
  CHECK(has(parse_error("tiles=1x4 split=2 split.pad=256"), "recipe field 'split.pad': splits by cache cell are modelled one key a tile"));
  CHECK(has(parse_error("q=int8/group:32 k=int4/group:32 qkscale=sequential kzero=qsum"), "recipe field 'kzero': qsum takes int4 K"));
  CHECK(has(parse_error("v=e4m3/channel/max:0.001"), "recipe field 'v.max': max 0.001 (the value the absmax maps to); expected 0.015625 <= max <= 448"));
  CHECK(has(parse_error("q=int8/tensor/amax:signed k=int8/tensor v=int8/tensor p=int8/static:127 softmax=qflash"),
            "recipe field 'q': an integer softmax (qflash, shiftmax) needs int8 with a per-tensor or per-head dynamic absmax scale"));
  CHECK(has(parse_error("qq=int8/token"), "unknown key 'qq'; did you mean 'q'?; expected one of: q, k, p, v"));
  CHECK(has(parse_error("q=int8/token q=int8/tensor"), "key 'q' given twice"));
  CHECK(has(parse_error("acc.pv=mma(chunk=32,bits=3)"), "unknown mma key 'bits'"));
  CHECK(has(parse_error("acc.pv=fp64"), "'fp64': expected exact, fp32, fp16, fp16fma, h200_hmma, h200_hmma_tile, h200_e4m3_mma, h200_e4m3_wgmma, "
                                         "h200_e4m3_wgmma_tile, h200_e4m3_wgmma_tile128, h200_wgmma_f16, h200_wgmma_bf16, h200_wgmma_bf16_tile or mma("));
  CHECK(has(parse_error("tiles=64"), "'64': expected BRxBC"));
  CHECK(has(parse_error("split=two"), "'two' is not a number"));
  CHECK(has(parse_error("ksmooth=always"), "unknown value 'always'; expected one of: none, global, block, block_corrected, running"));
  CHECK(has(parse_error("p=e4m3/token"), "recipe field 'p.scale': P is quantized with a static multiplier"));
  CHECK(has(parse_error("q=int8/token k=fp32"), "recipe field 'q.format/k.format'"));
  CHECK(has(parse_error("oops"), "token 'oops': expected key=value"));
  const auto j = nlohmann::json::parse(R"({"q": {"format": "int8", "gran": "token"}})");
  CHECK(has(error_text([&] { (void)recipe_from_json(j, "experiment.json: recipes[2]"); }),
            "experiment.json: recipes[2]: key 'q': unknown operand key 'gran'"));
  CHECK(has(error_text([&] { (void)recipe_from_json(nlohmann::json::parse(R"({"split": [1]})"), "x.json"); }),
            "x.json: key 'split': expected a string, number or boolean"));
  CHECK(has(error_text([&] { (void)recipe_from_json(nlohmann::json::parse(R"({"q": "int8/token"})"), "x.json"); }),
            "x.json: recipe field 'q.format/k.format'"));
  // Sizes only with the granularity that reads them; thread needs all three.
  const auto json_error = [](const char* text) { return error_text([&] { (void)recipe_from_json(nlohmann::json::parse(text), "x.json"); }); };
  CHECK(has(json_error(R"({"q": {"format": "int8", "granularity": "token", "period": 8}, "k": "int8/token"})"),
            "x.json: key 'q'.period: applies to granularity thread, not 'token'"));
  CHECK(has(json_error(R"({"q": {"format": "int8", "granularity": "head", "block": 8}, "k": "int8/token"})"),
            "x.json: key 'q'.block: applies to granularity block, group or thread, not 'head'"));
  CHECK(has(json_error(R"({"q": {"format": "int8", "granularity": "thread", "block": 16, "period": 8}, "k": "int8/token"})"),
            "x.json: key 'q'.width: absent; granularity 'thread' needs it (thread takes block, period and width)"));
  CHECK(has(json_error(R"({"q": {"format": "int8", "static": 2, "width": 1}, "k": "int8/token"})"),
            "x.json: key 'q'.width: applies to granularity thread, and no granularity is given"));
}

TEST_CASE("presets and the real kernels' knobs round-trip through both forms", "[recipe]") {
  for (const RecipePreset& p : recipe_presets()) {
    INFO(p.name);
    const Recipe r = recipe_from_string(std::string("preset=") + p.name);
    CHECK(to_string(recipe_from_string(to_string(r))) == to_string(r));
    CHECK(to_string(recipe_from_json(to_json(r))) == to_string(r));
    CHECK(to_string(recipe_from_string(p.line)) == to_string(r));  // the preset is its line
    CHECK(std::string(p.source).size() > 10);
  }
  const Recipe q = recipe_from_string("preset=qflash-46adca5 tiles=32x64");
  CHECK(q.tiles.block_k == 64);  // later keys override the preset
  CHECK(q.qflash.exp == QFlashVariant::Exp::fixed16);
  CHECK(q.qflash.requant == QFlashVariant::Requant::round16);
  CHECK(q.qflash.release == QFlashVariant::Release::shift30);
  CHECK(q.qflash.start == QFlashVariant::Start::kernel);
  CHECK(q.qflash.tail == QFlashVariant::Tail::pad);
  CHECK(q.qflash.division == QFlashVariant::Division::trunc32);
  CHECK(q.qflash.constants == QFlashVariant::Constants::kernel);
  CHECK(q.q.spec.divide);
  CHECK(q.q.spec.quotient_format == FormatId::fp16);
  CHECK(q.out == FormatId::fp16);
  const Recipe s = recipe_from_string("preset=sageattn-1.0.6");
  CHECK(s.q.spec.amax_mul);
  CHECK(s.k.spec.half_away);
  CHECK(s.q_prescale);
  CHECK(s.qk_scale_sequential);
  CHECK(s.pad_keys_zero);
  CHECK(s.k_smoothing_format == FormatId::fp16);
  CHECK(s.pv_acc.chunk_mantissa_bits == 10);
  CHECK(s.pv_acc.flush_every == 4);
  // JSON operand objects carry the same rules.
  const Recipe j = recipe_from_json(nlohmann::json::parse(
      R"({"q": {"format": "int8", "granularity": "block", "block": 128, "amax_mul": true, "round_away": true},
          "k": {"format": "int8", "granularity": "tensor", "scale_format": "fp16", "divide": "fp16"}, "acc.qk": "exact"})"));
  CHECK(operand_to_string(j.q) == "int8/block:128/amax:mul/round:away");
  CHECK(operand_to_string(j.k) == "int8/tensor/scale:fp16/div:fp16");
  // Keys appear in the canonical line only where they apply.
  CHECK(to_string(recipe_from_string("q=bf16")).find("qflash.") == std::string::npos);
  CHECK(to_string(recipe_from_string("q=bf16")).find("out=") == std::string::npos);
}

TEST_CASE("the real kernels' knobs reject what they cannot mean", "[recipe]") {
  CHECK(has(parse_error("preset=nope"), "unknown preset 'nope'; expected one of: qflash-46adca5"));
  CHECK(has(parse_error("preset=qflash-lab preset=qflash-lab"), "key 'preset' given twice"));
  CHECK(has(parse_error("qflash.requant=round16"), "need softmax=qflash"));
  CHECK(has(parse_error("out=int8"), "expected fp32, fp16 or bf16"));
  CHECK(has(parse_error("ksmooth.format=fp16"), "needs ksmooth=global or ksmooth=block"));
  CHECK(has(parse_error("q=int8/token/round:near acc.qk=exact"), "round takes 'away'"));
  CHECK(has(parse_error("q=e4m3/token/round:away"), "round:away rounds integer codes"));
  CHECK(has(parse_error("preset=qflash-46adca5 qprescale=1"), "need softmax=float"));
}

TEST_CASE("integer operands sum exactly unless the recipe names another accumulator", "[recipe]") {
  const Recipe r = recipe_from_string("q=int8/token k=int8/token");
  CHECK(r.qk_acc.kind == Accumulator::Kind::exact);
  CHECK(r.pv_acc.kind == Accumulator::Kind::fp32);  // float softmax: P V stays as the recipe says
  const Recipe j = recipe_from_json(nlohmann::json::parse(R"({"q": "int4/group:32", "k": "int4/group:32"})"));
  CHECK(j.qk_acc.kind == Accumulator::Kind::exact);
  const Recipe i = recipe_from_string("q=int8/tensor k=int8/tensor v=int8/tensor p=int8/static:127 softmax=qflash");
  CHECK(i.qk_acc.kind == Accumulator::Kind::exact);
  CHECK(i.pv_acc.kind == Accumulator::Kind::exact);
  CHECK(recipe_from_string("q=bf16 k=bf16").qk_acc.kind == Accumulator::Kind::fp32);
  CHECK(has(parse_error("q=int8/token k=int8/token acc.qk=fp32"), "recipe field 'acc.qk': integer QK^T accumulates in int32"));
  CHECK(has(parse_error("split=0"), "recipe field 'split': expected 1..4096"));
  // A mistyped split or tile is refused before the emulator allocates its partials (it was bad_alloc).
  CHECK(has(parse_error("split=1000000000"), "recipe field 'split': expected 1..4096"));
  CHECK(has(parse_error("tiles=64x100000"), "recipe field 'tiles': block sizes must be 1..4096"));
  // Accumulator errors name the key as the user types it.
  CHECK(has(parse_error("acc.pv=mma(chunk=0)"), "recipe field 'acc.pv.chunk'"));
  // e8m0 is a scale format, with or without a scale rule (unscaled, it gave NaN metrics).
  CHECK(has(parse_error("v=e8m0"), "recipe field 'v.format': e8m0 is a scale format"));
}

TEST_CASE("recipe text: the softmax's vendor math (expform, rowsum, norm) round-trips and prints only when moved", "[recipe]") {
  const Recipe r = recipe_from_string("q=bf16 k=bf16 v=bf16 p=bf16 norm=rcp rowsum=lanes expform=fa exp2=sfu");
  CHECK(r.exp_form == ExpForm::fa);
  CHECK(r.row_sum == RowSum::lanes);
  CHECK(r.norm == Norm::rcp);
  const std::string line = to_string(r);
  CHECK(r.exp2 == Exp2Math::sfu);
  CHECK(line.find("expform=fa rowsum=lanes norm=rcp exp2=sfu") != std::string::npos);  // the table's order
  CHECK(recipe_from_string(line) == r);
  CHECK(recipe_from_json(to_json(r)) == r);
  CHECK(to_string(recipe_from_string("q=bf16")).find("norm") == std::string::npos);  // earlier recipes print as before
  CHECK(error_text([] { (void)recipe_from_string("norm=approx"); }).find("norm") != std::string::npos);
}
