"""A recipe modifier that would change nothing, or is given twice, is an error, not a silent no-op
or a silent last-one-wins; a number past a double's range says so; a JSON preset is one name."""
import pytest

import qattn


@pytest.mark.parametrize("line, message", [
    ("q=int8/token k=int8/token v=int8/token/codes:fp32", "recipe field 'v.codes': codes:fp32 takes the codes from the fp32 scale"),
    ("q=int8/token/eps:1e-7/eps:1e-3 k=int8/token", "'int8/token/eps:1e-7/eps:1e-3': /eps given twice; expected each modifier once"),
    ("q=int8/token/scale:fp16/scale:bf16 k=int8/token", "/scale given twice"),
    ("q=int8/token/amax:mul/amax:signed k=int8/token", "/amax given twice"),
    ("q=int8/static:1e999 k=int8/static:1", "'1e999' is outside the range of a double"),
    ("q=int8/block:1e12 k=int8/token", "block: '1e12' is outside -1e9..1e9; expected an integer within it"),
])
def test_modifier_refused_with_its_reason(line, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.").replace("+", r"\+")):
        qattn.Recipe(line)


def test_codes_fp32_with_a_stored_scale_format_still_parses():
    assert "codes:fp32" in str(qattn.Recipe("q=int8/group:32/scale:fp16/codes:fp32 k=int8/group:32/scale:fp16/codes:fp32"))


def test_json_preset_is_one_name():
    with pytest.raises(ValueError, match="key 'preset': 'zinc q=fp32 k=fp32': expected one preset's name; the other keys go beside it"):
        qattn.Recipe.from_json('{"preset": "zinc q=fp32 k=fp32"}')
    name = qattn.presets()[0]["name"]
    assert str(qattn.Recipe.from_json('{"preset": "%s"}' % name)) == str(qattn.Recipe("preset=" + name))
