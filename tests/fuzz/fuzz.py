#!/usr/bin/env python3
"""Structure-aware mutation fuzzer for the qattn CLI (Python 3, standard library only).

Usage (scripts/fuzz.sh wraps this):
  fuzz.py [--exe QATTN] [--mutations N] [--seed S] [--out DIR] [--jobs J] [--timeout SEC]
          [--targets exp,bounds,recipe,h5] [--mem-mb MB] [--no-minimize] [--max-repro-per-class K]

Targets (each trial is one mutated input run once, in a fresh folder OUT/work/trials/tNNNNNN):
  exp     experiment JSON        -> qattn run EXP.json [--force | --resume (over a copied report)]
  bounds  bounds JSON (+ report) -> qattn check BOUNDS.json [--update]   (experiment or report mode;
                                    in report mode the report's results.jsonl is mutated too)
  recipe  one-line recipe        -> qattn eval --data SEED.h5 --layer L --recipe LINE --json [...]
  h5      HDF5 dump              -> qattn inspect FILE | qattn eval --data FILE ... | qattn run
Mutations are structure-aware: JSON trees (type swaps, extreme numbers 2^31/2^32/2^64/1e308,
NaN/Infinity literals, deleted/renamed (typo)/unknown/duplicate keys, duplicated list entries,
empty lists/objects, 20k-100k deep nesting, 100k-1M character strings, unicode, recipe strings
inside), recipe tokens (formats, granularities, static multipliers, scale formats incl. e8m0,
accumulators and mma(...) parameters, tiles, split, tau, presets, empty/unknown/repeated keys),
and HDF5 bytes (bit flips in metadata and data, extreme values written into the raw q/k/v ranges,
numeric attributes such as softmax_scale / sliding_window / causal / n_tokens found by name and
overwritten, truncation, appended junk, zeroed/0xFF blocks, superblock fields). With h5py in
/work/main/.venv-dump (or --h5py PYTHON), tests/fuzz/h5_semantic.py also makes ~85 semantic
mutants per seed dump once (missing datasets, wrong dtype/shape/rank, non-finite and extreme
values, bad attributes: softmax_scale 1e300, sliding_window 2^31 / 2^32 / 2^63-1, ...).

Seed corpus: tests/fuzz/corpus (--corpus): *.h5 (+ SEED.h5.layout.json byte ranges), exp-*.json,
bounds-*.json, report-*/ (report folders for report-mode bounds), recipes.txt (one line each).
Relative paths in the seeds are relative to the trial folder, which holds copies of all of them.

Determinism: trial i draws everything from random.Random(f"{seed}:{i}"), so a given --seed gives the
same cases in any --jobs; results are recorded in trial order.

Classification of a trial (first match wins):
  crash    killed by a signal (returncode < 0), or an exit code not in {0, 1, 2} (this includes
           CLI11's usage errors 104-106, tagged 'cli11 exit N'), or stderr containing one of
           CRASH_MARKERS ('terminate called', 'Segmentation', 'AddressSanitizer', 'runtime error:' ...).
           A bare signal is tagged with the kind of mutation ([deep nesting], [mutated report],
           [semantic HDF5]) so that distinct causes are kept (and minimized) apart.
  hang     ran past --timeout (default 20 s); the process group is killed. The finding notes how many
           '[k/N]' progress lines were seen (work was being done) but it is reported as a hang.
  nan      exit 0, and stdout or the written report (results.jsonl/csv, stats.jsonl, summary.md,
           config.json, figures/*.csv) holds a NaN or infinity printed as a number: in JSON a NaN /
           Infinity literal, a null in a metric field (NULL_METRICS: nlohmann::json writes a NaN
           or inf double as null; kl_mean / tv_mean may be null when kl_rows is 0), or a string
           value "nan"/"-nan"/"-inf"; "inf" is accepted only as a
           positive value of a *_db field (the documented encoding of an exact match's SQNR); in text
           a whitespace/|/,-delimited token nan, -nan, inf, -inf, infinity, nan(...) ("inf" is
           accepted on a line or CSV column that is about dB). Recipe strings are labels: a token
           such as p=int8/static:nan is never counted.
  unclear  nonzero exit (1 or 2) whose error message (the 'qattn: error:' / 'FAIL' lines, else the
           last stderr line) contains an internal marker (INTERNAL_MARKERS: stoll, stoi, stod,
           json.exception, basic_string, std::, bad_alloc, vector, map::at, nlohmann, HDF5-DIAG,
           H5xxx ...) or names neither an input file (the path or basename of the file given, the
           dataset/experiment/report it names, the output folder) nor a field: a JSON key of the
           input (or of the schema), a recipe key such as q, k, p, v, acc.qk (quoted, or followed by
           '=' or '.', or any key of 3+ characters as a word), a recipe token, an HDF5 path
           (/layers/...) or attribute name, or a CLI option (--tokens).
  (ok / error: exit 0 clean, or a clear error; counted, not findings.)
Findings: OUT/findings.jsonl (one JSON line each) and OUT/repro/<id>/ (input files + cmd.sh; at most
--max-repro-per-class per normalized message, 0 = all). The first finding of each (target, class,
normalized message) is then minimized (greedy deletion of recipe tokens / JSON members / byte
mutations, keeping the same class and message; --minimize-runs per class) into OUT/repro/<id>-min/.
Summary: stderr and OUT/summary.json: per target cases, ok, error, crash, hang, nan, unclear, and
the top distinct normalized messages (numbers -> N, quoted text -> 'S', file names -> FILE).

Safety: children run with RLIMIT_AS (--mem-mb, default 4096), RLIMIT_FSIZE 512 MB, no core files,
OMP_NUM_THREADS=1, TMPDIR inside the trial folder, in their own process group. An experiment's
output folder (or reports/<name>) is never allowed to resolve outside its trial folder: such a case
is not run (counted as skipped), and path-like pools never contain '..' or absolute output paths.
"""
import argparse
import csv
import io
import json
import math
import os
import re
import resource
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import random

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import surfaces  # noqa: E402 - the targets py, names, race and fit

CRASH_MARKERS = ["terminate called", "Segmentation", "AddressSanitizer", "runtime error:", "LeakSanitizer",
                 "UndefinedBehaviorSanitizer", "stack-overflow", "double free", "free(): ", "malloc(): ",
                 "corrupted size", "stack smashing", "Assertion `", "core dumped"]
INTERNAL_MARKERS = ["stoll", "stoi", "stol", "stoul", "stod", "stof", "json.exception", "basic_string", "std::",
                    "bad_alloc", "vector", "map::at", "nlohmann", "HDF5-DIAG", "bad_variant", "bad_optional",
                    "out_of_range", "invalid_argument", "what():", "basic_filebuf", "filesystem error:"]
# Keys that count when they appear as a plain word in a message (others must be quoted, or be
# followed by '=', '.', '['): distinctive enough not to be ordinary English.
WORD_KEYS = {"recipe", "recipes", "dataset", "selection", "contexts", "context", "layers", "layer", "heads",
             "statistics", "sweep", "vary", "bounds", "experiment", "seed", "rows", "tiles", "split", "tau",
             "ksmooth", "qsmooth", "vsmooth", "rotation", "softmax", "denominator", "preset", "schema", "model",
             "weights", "causal", "rope", "tokens", "granularity", "format", "dtype", "--tokens", "--rows",
             "--heads", "--kl-rows", "--layer", "--seed", "--recipe", "--data", "--backend", "--resume", "--force",
             "--update"}
INTERNAL_RE = re.compile(r"\bH5[A-Z][A-Za-z_]*\b")

FORMATS = ["fp32", "bf16", "fp16", "e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e2m1", "e8m0", "int8", "int4"]
BAD_FORMATS = ["int16", "fp8", "E4M3", "Int8", "int 8", "fp64", "e3m4", "int2", "uint8", "", "e8m0 ", "int8\t"]
GRANS = ["tensor", "head", "token", "channel", "block:{n}", "group:{n}", "block", "group", "row", "token:{n}",
         "group:{n}:{n}", "block:", "kvhead", "kvhead:{n}", "thread:{n}:{n}:{n}", "thread:{n}", "thread:{n}:{n}", "thread"]
INTS = ["0", "1", "2", "3", "4", "7", "8", "16", "17", "31", "32", "33", "63", "64", "65", "128", "-1", "-16",
        "-2147483648", "2147483647", "2147483648", "4294967295", "4294967296", "4294967297", "1000000000",
        "9223372036854775807", "9223372036854775808", "18446744073709551616", "99999999999999999999",
        "1e9", "1.5", "0x10", "+3", "010", "", " ", "nan", "\u0661"]
SMALL_INTS = ["0", "1", "2", "3", "4", "8", "16", "32", "64", "-1", "2147483647", "2147483648", "4294967296", "", "x"]
STATICS = ["127", "448", "240", "57344", "0.5", "1", "2", "8", "1e38", "3.4e38", "3.4028235e38", "3.5e38", "1e39",
           "1e308", "1.8e308", "1e309", "0", "-0", "-1", "-448", "nan", "NaN", "-nan", "inf", "-inf", "infinity",
           "1e-45", "1e-46", "5e-324", "1e-320", "0x1p3", "1e", "", "abc", "127.0000000000000000001", "1_000",
           "127 ", "4.5e15", "2147483648", "16777217"]
ROUNDS = ["zero", "even", "away", "up", "down", "", "nearest"]
ACCS = ["exact", "fp32", "fp16", "fp16fma", "bf16", "h200_hmma", "h200_e4m3_mma", "h200_wgmma_f16", "h200_e4m3_wgmma", "h200_e4m3_wgmma_tile", "h200_e4m3_wgmma_tile128", "h200_hmma_tile", "h200_wgmma_bf16", "h200_wgmma_bf16_tile", "int32", "", "mma", "mma()",
        "mma(", "mma(chunk=32", "mma(chunk=32,chunk=16)", "mma(x=1)", "mma(chunk=32,,align=32)", "MMA(chunk=32)"]
MMA_KEYS = ["chunk", "align", "chunk_bits", "chunk_round", "acc_bits", "add_round", "flush", "fused", "factor_emin"]
TILE_INTS = ["0", "1", "2", "3", "8", "16", "17", "32", "48", "64", "65", "128", "192", "256", "1024", "65536",
             "2147483647", "4294967296", "-16", "", "1.5", "1e2"]
ENUMS = {
    "ksmooth": ["none", "global", "block", "block_corrected", "running", "zinc", "bogus", "", "GLOBAL"],
    "qsmooth": ["0", "1", "2", "-1", "true", "yes", ""], "vsmooth": ["0", "1", "2", "true", ""],
    "qprescale": ["0", "1", "2", "", "0.5"],
    "rotation": ["none", "hadamard", "random", "", "Hadamard"],
    "softmax": ["float", "qflash", "shiftmax", "exact", "", "int"],
    "denominator": ["quantized", "float", "exact", ""],
    "out": FORMATS + ["int32", "", "fp64"],
    "ksmooth.format": FORMATS + ["fp64", ""],
    "qkscale": ["joint", "sequential", "both", ""],
    "pad": ["none", "zero", "one", ""],
    "kzero": ["codes", "qsum", "sum", ""], "order": ["forward", "reverse", "backward", ""],
    "qflash.consts": ["lab", "kernel", "bogus", ""], "qflash.exp": ["lab", "fixed16", "kernel", "x"],
    "qflash.requant": ["lab", "round16", "x"], "qflash.release": ["lab", "shift30", "x"],
    "qflash.start": ["lab", "kernel", "x"], "qflash.tail": ["lab", "pad", "x"], "qflash.div": ["lab", "trunc32", "x"],
}
PRESETS = ["qflash-46adca5", "sageattn-1.0.6", "sageattn2-sm90", "sageattn2-sm89", "fa3-fp8", "llamacpp-q8_0",
           "llamacpp-q4_0", "fa3-bf16", "llamacpp-q8_0-cpu", "llamacpp-q4_0-cpu", "llamacpp-f16-cpu", "llamacpp-f16-cpu-decode", "zinc", "dot4-packed16", "qflash-lab", "bogus", "", "QFLASH-LAB", "zinc "]
RECIPE_KEYS = ["q", "k", "p", "v", "ksmooth", "ksmooth_block", "qsmooth", "vsmooth", "rotation", "softmax",
               "denominator", "acc.qk", "acc.pv", "tiles", "split", "split.pad", "split.min", "tau", "qflash.consts", "qflash.exp",
               "qflash.requant", "qflash.release", "qflash.start", "qflash.tail", "qflash.div", "ksmooth.format",
               "qprescale", "qkscale", "pad", "kzero", "order", "out", "preset"]
UNKNOWN_KEYS = ["foo", "Q", "acc", "acc.qq", "q.k", "sqnr", "K", "tile", "splits", "acc.qk.x", "p.format", "window",
                "sliding_window", "causal", "\u00e9", "_", "q_"]
UNICODE = ["\u00e9", "\u65e5\u672c\u8a9e", "\u202e", "\U0001F642", "\ufeff", "\u0000", "\u200b", "\uffff",
           "\u0130", "\u2028", "\u0435"]  # last: Cyrillic e
SCHEMA_KEYS = ["name", "dataset", "selection", "layers", "heads", "contexts", "rows", "recipes", "sweep", "base",
               "vary", "statistics", "p_formats", "output", "seed", "kl_rows", "experiment", "report", "note",
               "bounds", "recipe", "layer", "context", "sqnr_db_min", "kl_max", "kernel_vs_recipe_db_min",
               "sqnr_db", "kl_mean", "kernel_vs_recipe_sqnr_db", "results.jsonl", "config.json", "format",
               "granularity"]
H5_NAMES = ["schema", "model", "weights", "text_source", "n_tokens", "created_by", "created_at", "causal",
            "sliding_window", "softmax_scale", "rope", "tokens", "layers", "dtype", "softmax scale",
            "superblock", "HDF5", "/layers", "Hq", "Hkv", "head dim"]


# ----------------------------------------------------------------------------------------------
# JSON trees: Obj keeps key order and allows duplicate keys; Raw is literal text (NaN, 1e309, deep
# nesting) written as is.

class Obj:
    def __init__(self, pairs):
        self.pairs = [list(p) for p in pairs]

    def get(self, k, default=None):
        for kk, v in reversed(self.pairs):
            if kk == k:
                return v
        return default

    def all(self, k):
        return [v for kk, v in self.pairs if kk == k]

    def keys(self):
        return [k for k, _ in self.pairs]


class Raw:
    def __init__(self, text, label=None):
        self.text = text
        self.label = label or (text if len(text) < 40 else text[:20] + f"...({len(text)} chars)")


def jload(text):
    return json.loads(text, object_pairs_hook=Obj)


def jdump(v, ascii_=True, indent=0, level=0):
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, Obj):
        if not v.pairs:
            return "{}"
        sep = ("\n" + " " * (indent * (level + 1))) if indent else ""
        end = ("\n" + " " * (indent * level)) if indent else ""
        return "{" + sep + ("," + (sep or " ")).join(
            json.dumps(k, ensure_ascii=ascii_) + ": " + jdump(x, ascii_, indent, level + 1) for k, x in v.pairs) + end + "}"
    if isinstance(v, list):
        return "[" + ", ".join(jdump(x, ascii_, indent, level + 1) for x in v) + "]"
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=ascii_)
    raise TypeError(type(v))


def slots(node, path=""):
    """Every child slot of a tree: (container, index into pairs / list, path, key)."""
    out = []
    if isinstance(node, Obj):
        for i, (k, v) in enumerate(node.pairs):
            p = f"{path}.{k}" if path else str(k)
            out.append((node, i, p, k))
            out += slots(v, p)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            p = f"{path}[{i}]"
            out.append((node, i, p, None))
            out += slots(v, p)
    return out


def slot_get(c, i):
    return c.pairs[i][1] if isinstance(c, Obj) else c[i]


def slot_set(c, i, v):
    if isinstance(c, Obj):
        c.pairs[i][1] = v
    else:
        c[i] = v


def copy_tree(v):
    if isinstance(v, Obj):
        return Obj([[k, copy_tree(x)] for k, x in v.pairs])
    if isinstance(v, list):
        return [copy_tree(x) for x in v]
    return v


def tree_keys(v, acc=None):
    acc = set() if acc is None else acc
    if isinstance(v, Obj):
        for k, x in v.pairs:
            acc.add(str(k))
            tree_keys(x, acc)
    elif isinstance(v, list):
        for x in v:
            tree_keys(x, acc)
    return acc


def tree_strings(v, acc=None):
    acc = [] if acc is None else acc
    if isinstance(v, Obj):
        for _, x in v.pairs:
            tree_strings(x, acc)
    elif isinstance(v, list):
        for x in v:
            tree_strings(x, acc)
    elif isinstance(v, str):
        acc.append(v)
    return acc


# ----------------------------------------------------------------------------------------------
# Value pools

NUM_EXTREME = [0, -1, 1, 2, -2**31, 2**31 - 1, 2**31, 2**32, 2**32 + 1, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1,
               2**64, -2**63 - 1, 10**30, 1e308, -1e308, 1.5, 0.5, -0.0, 1e-308, 5e-324, 1e20, 3e38,
               Raw("1e309"), Raw("-1e309"), Raw("1E+2"), Raw("1.0"), Raw("-0"), Raw("123456789012345678901234567890"),
               Raw("18446744073709551616"), Raw("-9223372036854775809"), Raw("1E400"), Raw("2.0e0"), Raw("64.0"),
               Raw("1e-400"), Raw("4.9e-324")]
# Not JSON at all (nlohmann rejects them while parsing): used for a few of the extreme values.
INVALID_LITERALS = [Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("nan"), Raw("0x10"), Raw("01"), Raw("+1"),
                    Raw(".5"), Raw("1."), Raw("undefined")]


def extreme(rng):
    return rng.choice(INVALID_LITERALS) if rng.random() < 0.1 else rng.choice(NUM_EXTREME)


def type_pool(rng):
    return rng.choice([None, True, False, 0, -1, 1, 2**31, 2**32, 1e308, 1.5, "", "x", "0", "1", [], Obj([]), [0],
                       [[0]], Obj([["a", 1]]), ["x", "x"], "true", "null", Raw("1e309"),
                       Raw("-0"), Raw("18446744073709551616")])


SAFE_NAMES = ["fuzz", "", "x" * 200, "x" * 300, "a b", "\u00e9\u65e5\u672c", "a/b", "a\\b", "-", "--force",
              "\u202e", " ", "\t", "%s%n", "{}", "{0}", "{:>999999999}", "report", "n\u0000x", "\n", "."]
SAFE_OUTPUTS = ["report", "report/", "out/sub/dir", "", "report-basic", "exp-basic.json", "tiny-a.h5", "x" * 300,
                "\u00e9", " ", "rep\nort", "-", "report\u0000x", "tmp", "a/b/c/d/e/f"]
READ_PATHS = ["tiny-a.h5", "tiny-b.h5", "", ".", "nonexistent.h5", "exp-basic.json", "report-basic",
              "report-basic/results.jsonl", "tiny-a.h5 ", "TINY-A.H5", "x" * 300, "/nonexistent/abs.h5",
              "../tiny-a.h5", "tiny-a.h5\u0000x", "exp-bounds.json", "bounds-exp.json", "tmp"]
LAYER_POOL = [0, 1, "0", "1", 2, "2", -1, "-1", "01", 1.0, "abc", "", 2**31, 2**32, " 0", "0 ", None, [0], "1e0"]
CTX_POOL = [0, 1, 2, 16, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000000, 2**31 - 1, 2**31, 2**32, -1, -64, "64",
            64.0, 64.5, None]
HEAD_POOL = [0, 1, 2, 3, -1, 2**31 - 1, 2**31, "0", 1.5, None]
ROWS_POOL = [0, 1, 2, -1, 7, 63, 64, 65, 1000, 10**9, 2**31, "16", 16.5, None]
KLROWS_POOL = [0, 1, 2, 16, 63, 64, 65, 10**6, -1, 2**31, "4", None]
SEED_POOL = [0, 1, 2**32, 2**64 - 1, 2**64, -1, 1.5, "1", Raw("1e309")]
DB_POOL = [1, 0, -1, 100, 1e308, -1e308, 5e-324, "inf", "nan", "-inf", "Infinity", None, Raw("NaN"),
           Raw("Infinity"), Raw("1e309"), Raw("-1e309"), "45", True, [1], 2**64]
RECIPE_NAMES = ["int8 QK", "+ e4m3 P 448", "", "INT8 QK", "int8 QK ", "\u00e9", "x" * 1000, "int8", "q=int8/token"]


def key_typo(rng, k):
    k = str(k)
    ops = []
    if len(k) > 1:
        ops += ["drop", "swap"]
    ops += ["double", "case", "suffix", "dash", "space", "unicode"]
    op = rng.choice(ops)
    i = rng.randrange(len(k)) if k else 0
    if op == "drop":
        return k[:i] + k[i + 1:]
    if op == "swap" and len(k) > 1:
        i = min(i, len(k) - 2)
        return k[:i] + k[i + 1] + k[i] + k[i + 2:]
    if op == "double":
        return k[:i] + (k[i] if k else "x") + k[i:]
    if op == "case":
        return k.upper() if k != k.upper() else k.lower() + "X"
    if op == "suffix":
        return k + rng.choice(["s", "_", "2", ".", "_min"])
    if op == "dash":
        return k.replace("_", "-") if "_" in k else k + "-"
    if op == "space":
        return rng.choice([" " + k, k + " "])
    return k[:i] + rng.choice(UNICODE[:5] + ["\u0435"]) + k[i + 1:]


def gen_string(rng):
    r = rng.random()
    if r < 0.3:
        return rng.choice(["A", "\u00e9", "ab"]) * rng.choice([10**4, 10**5, 3 * 10**5, 10**6])
    if r < 0.6:
        return "".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 6)))
    return rng.choice(["", " ", "\t", "{}", "%s", "{:>999999999}", "x\u0000y", "\\", "\"", "0", "1e309", "null"])


def deep_raw(rng):
    d = rng.choice([20000, 50000, 100000])
    if rng.random() < 0.5:
        return Raw("[" * d + "]" * d, f"[[...]] depth {d}")
    return Raw('{"a":' * d + "1" + "}" * d, f'{{"a":...}} depth {d}')


# ----------------------------------------------------------------------------------------------
# Recipes

def gen_operand(rng, key):
    if rng.random() < 0.15:
        return rng.choice(FORMATS + BAD_FORMATS)
    fmt = rng.choice(FORMATS) if rng.random() < 0.9 else rng.choice(BAD_FORMATS)
    parts = [fmt]
    if (key == "p" and rng.random() < 0.6) or rng.random() < 0.08:
        parts.append("static:" + rng.choice(STATICS))
    elif rng.random() < 0.8:
        g = rng.choice(GRANS)
        parts.append(g.replace("{n}", rng.choice(INTS), 1).replace("{n}", rng.choice(SMALL_INTS)))
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        s = rng.choice(["scale:" + rng.choice(FORMATS + BAD_FORMATS[:3]), "div", "div:" + rng.choice(FORMATS + [""]),
                        "amax:mul", "amax:" + rng.choice(["div", "x", ""]), "round:away", "round:" + rng.choice(ROUNDS),
                        "static:" + rng.choice(STATICS), "scale:e8m0", "", "tensor", "x:1", "eps:" + rng.choice(STATICS),
                        "amax:signed", "codes:fp32", "codes:" + rng.choice(FORMATS + [""]), "max:" + rng.choice(STATICS)])
        parts.append(s)
    return "/".join(parts)


def mutate_operand(rng, value, key):
    parts = value.split("/")
    op = rng.randrange(7)
    if op == 0:
        parts[0] = rng.choice(FORMATS + BAD_FORMATS)
    elif op == 1:
        return gen_operand(rng, key)
    elif op == 2:
        parts.append(rng.choice(["static:" + rng.choice(STATICS), "scale:" + rng.choice(FORMATS), "div", "amax:mul",
                                 "round:away", "", "eps:1e-07", "amax:signed", "codes:fp32"]))
    elif op == 3 and len(parts) > 1:
        del parts[rng.randrange(1, len(parts))]
    elif op == 4 and len(parts) > 1:
        i = rng.randrange(1, len(parts))
        parts.insert(i, parts[i])  # a repeated suffix
    elif op == 5:
        for i, p in enumerate(parts):
            if ":" in p:
                a = p.split(":")[0]
                parts[i] = a + ":" + (rng.choice(STATICS) if a == "static" else rng.choice(INTS + FORMATS))
                break
        else:
            parts.append("static:" + rng.choice(STATICS))
    else:
        parts = [rng.choice(FORMATS)] + [rng.choice(GRANS).replace("{n}", rng.choice(INTS))]
    return "/".join(parts)


def gen_acc(rng):
    if rng.random() < 0.55:
        return rng.choice(ACCS)
    keys = rng.sample(MMA_KEYS, rng.randint(0, len(MMA_KEYS)))
    if rng.random() < 0.2:
        keys.append(rng.choice(MMA_KEYS + ["bits", "x", ""]))
    kv = []
    for k in keys:
        v = rng.choice(ROUNDS) if "round" in k else rng.choice(INTS)
        kv.append(f"{k}={v}")
    return "mma(" + ",".join(kv) + ")"


def gen_value(rng, key):
    if key in ("q", "k", "v", "p"):
        return gen_operand(rng, key)
    if key in ("acc.qk", "acc.pv"):
        return gen_acc(rng)
    if key == "tiles":
        r = rng.random()
        if r < 0.85:
            return f"{rng.choice(TILE_INTS)}x{rng.choice(TILE_INTS)}"
        return rng.choice(["64", "x", "64x64x64", "64X64", "64*64", "x64", "64x", "0x0", "fa3_sm90", "fa3_sm80", "FA3_SM90", "fa3_sm90x64"])
    if key in ("split", "ksmooth_block", "split.pad", "split.min"):
        return rng.choice(INTS)
    if key == "tau":
        return rng.choice(INTS + STATICS[:20])
    if key == "preset":
        return rng.choice(PRESETS)
    if key in ENUMS:
        return rng.choice(ENUMS[key]) if rng.random() < 0.9 else rng.choice(INTS + FORMATS)
    return rng.choice(INTS + FORMATS + ["", "x"])


def tokens_of(line):
    return line.split(" ") if line else []


def mutate_recipe(rng, line, nops=None):
    """Token-level mutation of a one-line recipe; returns (line, descriptions)."""
    toks = [t for t in line.split(" ") if t]
    desc = []
    for _ in range(nops or rng.choice([1, 1, 2, 2, 3, 4])):
        op = rng.choices(range(16), [9, 0, 0, 0, 0, 3, 0, 1, 0.7, 1, 1, 1, 0.6, 0.6, 0.6, 1.0])[0]
        kv = [(t.split("=", 1) + [""])[:2] if "=" in t else [t, None] for t in toks]
        if op <= 4 and toks:  # change the value of an existing key
            i = rng.randrange(len(toks))
            k, v = kv[i]
            if v is not None and k in ("q", "k", "v", "p") and rng.random() < 0.6:
                nv = mutate_operand(rng, v, k)
            else:
                nv = gen_value(rng, k)
            toks[i] = f"{k}={nv}"
            desc.append(f"set {k}={nv}")
        elif op <= 6:  # add a key (mostly one not given yet; sometimes an unknown one)
            have = {x[0] for x in kv}
            absent = [k for k in RECIPE_KEYS if k not in have]
            k = rng.choice(absent or RECIPE_KEYS) if rng.random() < 0.9 else rng.choice(UNKNOWN_KEYS)
            nv = gen_value(rng, k)
            toks.insert(rng.randrange(len(toks) + 1), f"{k}={nv}")
            desc.append(f"add {k}={nv}")
        elif op == 7 and toks:
            i = rng.randrange(len(toks))
            desc.append(f"delete {toks[i]}")
            del toks[i]
        elif op == 8 and toks:  # repeated key
            i = rng.randrange(len(toks))
            k = kv[i][0]
            t = f"{k}={gen_value(rng, k)}" if rng.random() < 0.5 else toks[i]
            toks.append(t)
            desc.append(f"repeat {t}")
        elif op == 9:  # empty / malformed fields
            t = rng.choice(["q=", "=int8", "=", "q", "q==int8", "acc.qk=", "==", "p=/static:127", "q=int8/", "q=/",
                            "tiles=x", "split=", "k=int8//token", "acc.=exact", ".qk=exact"])
            toks.insert(rng.randrange(len(toks) + 1), t)
            desc.append(f"field {t!r}")
        elif op == 10 and len(toks) >= 2:  # swap values between keys
            i, j = rng.sample(range(len(toks)), 2)
            if kv[i][1] is not None and kv[j][1] is not None:
                toks[i], toks[j] = f"{kv[i][0]}={kv[j][1]}", f"{kv[j][0]}={kv[i][1]}"
                desc.append(f"swap values of {kv[i][0]} and {kv[j][0]}")
        elif op == 11 and toks:  # key typo
            i = rng.randrange(len(toks))
            k, v = kv[i]
            nk = key_typo(rng, k)
            toks[i] = nk + ("=" + v if v is not None else "")
            desc.append(f"rename {k} -> {nk!r}")
        elif op == 12:  # separators
            sep = rng.choice(["  ", "\t", ",", "\n", " , ", ";"])
            desc.append(f"separator {sep!r}")
            return (sep.join(toks) + rng.choice(["", " ", "\t"])), desc
        elif op == 13:  # huge token
            k = rng.choice(["q", "p", "acc.qk", "tiles", "split", "foo"])
            n = rng.choice([1000, 10000, 60000])
            nv = rng.choice(["int8/" * (n // 5), "9" * n, "mma(" + "chunk=32," * (n // 9) + ")", "x" * n])
            toks.append(f"{k}={nv}")
            desc.append(f"huge {k}= ({len(nv)} chars)")
        elif op == 14 and toks:  # unicode / case
            i = rng.randrange(len(toks))
            t = toks[i]
            r = rng.random()
            if r < 0.3:
                t = t.upper()
            elif r < 0.6:
                t = t.replace("o", "\u043e").replace("e", "\u0435")  # Cyrillic look-alikes
            else:
                t = t.translate({ord(c): ord(c) + 0xFEE0 for c in "0123456789abcdefghijklmnopqrstuvwxyz"})  # full width
            desc.append(f"unicode {toks[i]} -> {t}")
            toks[i] = t
        else:  # presets (replacing a preset given already)
            p = rng.choice(PRESETS)
            toks = [t for t in toks if not t.startswith("preset=")]
            toks.insert(0, f"preset={p}")
            desc.append(f"preset={p}")
    return " ".join(toks), desc


# ----------------------------------------------------------------------------------------------
# JSON tree mutation (experiments and bounds)

def pool_for(key, path, rng):
    """A domain value for a slot, by its key / path."""
    if key == "name":
        return rng.choice(SAFE_NAMES)
    if key == "output":
        return rng.choice(SAFE_OUTPUTS)
    if key in ("dataset", "experiment", "report"):
        return rng.choice(READ_PATHS)
    if ".layers" in path or path.startswith("layers") or key == "layer":
        return rng.choice(LAYER_POOL)
    if ".contexts" in path or key == "context":
        return rng.choice(CTX_POOL)
    if ".heads" in path:
        return rng.choice(HEAD_POOL)
    if key == "rows":
        return rng.choice(ROWS_POOL)
    if key == "kl_rows":
        return rng.choice(KLROWS_POOL)
    if key == "seed":
        return rng.choice(SEED_POOL)
    if key in ("sqnr_db_min", "kl_max", "kernel_vs_recipe_db_min"):
        return rng.choice(DB_POOL)
    if key == "recipe":
        return rng.choice(RECIPE_NAMES)
    if "p_formats" in path:
        return gen_operand(rng, "p")
    if key in RECIPE_KEYS and ("recipes" in path or "vary" in path):
        return gen_value(rng, key)
    return None


def in_recipe_area(path):
    return path.startswith("recipes") or path.startswith("sweep")


def mutate_tree(rng, tree, nops=None):
    desc = []
    for _ in range(nops or rng.choice([1, 1, 1, 2, 2, 3])):
        ss = slots(tree)
        op = rng.randrange(20)
        if not ss or op == 19:  # add an unknown / known key at some object
            objs = [tree] if isinstance(tree, Obj) else []
            objs += [slot_get(c, i) for c, i, _, _ in ss if isinstance(slot_get(c, i), Obj)]
            if not objs:
                continue
            o = rng.choice(objs)
            k = rng.choice(["foo", "Name", "selections", "recipe", "sweeps", "layers", "note", "bounds", "x" * 1000,
                            "", "\u00e9", "heads", "contexts", "statistics", "kl_rows", "seed"] + RECIPE_KEYS[:6])
            v = type_pool(rng)
            o.pairs.insert(rng.randrange(len(o.pairs) + 1), [k, v])
            desc.append(f"add key {k[:40]!r}: {short(v)}")
            continue
        c, i, path, key = rng.choice(ss)
        cur = slot_get(c, i)
        lkey = key if key is not None else (re.sub(r"\[\d+\]$", "", path).split(".")[-1])
        if op <= 4:  # domain value
            v = pool_for(lkey, path, rng)
            if v is None or rng.random() < 0.25:
                v = extreme(rng) if rng.random() < 0.6 else type_pool(rng)
            slot_set(c, i, v)
            desc.append(f"{path} = {short(v)}")
        elif op <= 6:  # type swap / extreme number
            v = extreme(rng) if rng.random() < 0.5 else type_pool(rng)
            if lkey in ("name", "output"):
                v = pool_for(lkey, path, rng) if rng.random() < 0.5 else rng.choice([0, None, [], Obj([]), True, 1.5])
            slot_set(c, i, v)
            desc.append(f"{path} = {short(v)}")
        elif op == 7:  # delete
            desc.append(f"delete {path}")
            if isinstance(c, Obj):
                del c.pairs[i]
            else:
                del c[i]
        elif op == 8 and isinstance(c, Obj):  # rename (typo)
            nk = key_typo(rng, key)
            if nk in ("output", "name"):
                continue
            c.pairs[i][0] = nk
            desc.append(f"rename {path} -> {nk!r}")
        elif op == 9 and isinstance(c, list):  # duplicate a list entry
            n = rng.choice([1, 1, 2, 7])
            for _ in range(n):
                c.insert(i, copy_tree(cur))
            desc.append(f"duplicate {path} x{n + 1}")
        elif op == 9 and isinstance(c, Obj) and key not in ("output", "name"):  # duplicate key
            c.pairs.insert(i + 1, [key, rng.choice([copy_tree(cur), type_pool(rng)])])
            desc.append(f"duplicate key {path}")
        elif op == 10:  # empty container
            v = rng.choice([[], Obj([])]) if not isinstance(cur, (list, Obj)) else ([] if isinstance(cur, list) else Obj([]))
            if lkey in ("name", "output"):
                continue
            slot_set(c, i, v)
            desc.append(f"{path} = {short(v)}")
        elif op == 11:  # huge / unicode string
            if lkey in ("name", "output"):
                v = rng.choice(SAFE_NAMES if lkey == "name" else SAFE_OUTPUTS)
            else:
                v = gen_string(rng)
            slot_set(c, i, v)
            desc.append(f"{path} = {short(v)}")
        elif op == 12 and rng.random() < 0.5:  # deep nesting (rarer)
            if lkey in ("name", "output"):
                continue
            v = deep_raw(rng)
            slot_set(c, i, v)
            desc.append(f"{path} = {v.label}")
        elif op <= 15 and in_recipe_area(path) and isinstance(cur, str):  # recipe string inside
            if path.startswith("sweep.vary"):
                v = gen_value(rng, path.split(".")[2].split("[")[0])
            else:
                v, d = mutate_recipe(rng, cur)
            slot_set(c, i, v)
            desc.append(f"{path} = {short(v)}")
        elif op <= 15 and in_recipe_area(path) and isinstance(cur, Obj):  # JSON-form recipe
            k = rng.choice(RECIPE_KEYS + UNKNOWN_KEYS[:4] + ["format", "granularity", "static", "scale_format"])
            # the operand object's keys, sizes of every granularity (thread's three) and modifiers
            extra = [[x, rng.choice([rng.choice(NUM_EXTREME), type_pool(rng), rng.choice([1, 8, 16, 64, 128, 0, -1, 2**31])])]
                     for x in rng.sample(["block", "period", "width", "static", "eps", "max", "amax_mul", "round_away",
                                          "amax_signed", "codes_fp32", "divide", "scale_format"], rng.randint(0, 4))]
            v = rng.choice([gen_value(rng, k), rng.choice(NUM_EXTREME), type_pool(rng),
                            Obj([["format", rng.choice(FORMATS + BAD_FORMATS)], ["granularity", rng.choice(GRANS + ["thread", "kvhead"])]] + extra)])
            cur.pairs.append([k, v])
            desc.append(f"{path}.{k} = {short(v)}")
        elif op == 16 and isinstance(c, Obj) and key in ("recipes",):
            # many duplicate-looking recipe names
            if isinstance(cur, Obj) and cur.pairs:
                n, v = cur.pairs[0]
                cur.pairs.append([n, v])
                desc.append(f"duplicate recipe name {n!r}")
        elif op == 17:  # wrap in a list / object
            if lkey in ("name", "output"):
                continue
            v = rng.choice([[cur], Obj([["x", cur]]), [cur, cur]])
            slot_set(c, i, v)
            desc.append(f"wrap {path}")
        else:  # extreme number anywhere
            v = extreme(rng)
            if lkey in ("name", "output"):
                continue
            slot_set(c, i, v)
            desc.append(f"{path} = {short(v)}")
    return desc


def text_mutate(rng, text):
    """Low-probability character-level damage (never inserts '.' or '/')."""
    op = rng.randrange(8)
    if op == 0 and text:
        n = rng.randrange(len(text))
        return text[:n], f"truncate at {n}"
    if op == 1 and text:
        n = rng.randrange(len(text))
        return text[:n] + text[n + 1:], f"delete char {n}"
    if op == 2:
        n = rng.randrange(len(text) + 1)
        ch = rng.choice(list('{}[]",:\\ \x00x') + ["\u00e9"])
        return text[:n] + ch + text[n:], f"insert {ch!r} at {n}"
    if op == 3:
        return text + rng.choice(["}", "x", "\n{}", "\x00", " // c"]), "trailing junk"
    if op == 4:
        return "\ufeff" + text, "BOM"
    if op == 5:
        return rng.choice(["", " ", "\n", "null", "[]", "0", '""', "{}"]), "whole file replaced"
    if op == 6:
        return text + text, "document twice"
    return "/* c */" + text, "leading comment"


def short(v, n=60):
    s = v.label if isinstance(v, Raw) else jdump(v) if not isinstance(v, str) else json.dumps(v)
    return s if len(s) <= n else s[:n] + f"...({len(s)} chars)"


# ----------------------------------------------------------------------------------------------
# HDF5 byte mutation

def pack_val(dtype, x):
    if dtype.endswith("f2"):
        try:
            return struct.pack("<e", x)
        except (OverflowError, struct.error):
            if math.isnan(x):
                return b"\x00\x7e"
            return b"\x00\x7c" if x > 0 else b"\x00\xfc"
    if dtype.endswith("f4"):
        try:
            return struct.pack("<f", x)
        except OverflowError:
            return struct.pack("<f", math.inf if x > 0 else -math.inf)
    if dtype.endswith("f8"):
        return struct.pack("<d", x)
    return None


H5_SPECIAL = [math.nan, math.inf, -math.inf, 1e20, 3e38, -3e38, 65504.0, -65504.0, 6e-8, 1e-42, 0.0, -0.0, 1e30]
H5_SIGS = [b"OHDR", b"OCHK", b"TREE", b"HEAP", b"SNOD", b"BTHD", b"BTIN", b"BTLF", b"FRHP", b"FHDB", b"GCOL",
           b"\x89HDF", b"softmax_scale", b"sliding_window", b"causal", b"n_tokens", b"schema", b"qattn-dump",
           b"layers", b"rope"]


def h5_mutate(rng, data, layout, nops):
    b = bytearray(data)
    desc = []
    dsets = list((layout or {}).get("datasets", {}).values())
    first_data = min([d["offset"] for d in dsets], default=min(4096, len(b)))
    for _ in range(nops):
        op = rng.randrange(13)
        if not b:
            break
        if op <= 2:  # metadata bit flips
            hi = max(1, first_data if rng.random() < 0.7 else len(b))
            n = rng.choice([1, 1, 2, 4, 8])
            offs = []
            for _ in range(n):
                o = rng.randrange(min(hi, len(b)))
                b[o] ^= 1 << rng.randrange(8)
                offs.append(o)
            desc.append(f"flip bits at {offs}")
        elif op == 3:  # near a signature / attribute name
            sig = rng.choice(H5_SIGS)
            hits = [m.start() for m in re.finditer(re.escape(sig), bytes(b))]
            if hits:
                o = rng.choice(hits) + rng.randrange(-16, 64)
                o = max(0, min(len(b) - 1, o))
                b[o] = rng.randrange(256)
                desc.append(f"byte {o} near {sig!r} = random")
        elif op <= 5 and dsets:  # extreme value into q/k/v raw data
            d = rng.choice(dsets)
            x = rng.choice(H5_SPECIAL)
            enc = pack_val(d["dtype"], x)
            if enc:
                esz = len(enc)
                n_el = d["nbytes"] // esz
                count = rng.choice([1, 1, 1, d["shape"][-1], n_el])
                start = rng.randrange(max(1, n_el - count + 1))
                o = d["offset"] + start * esz
                b[o:o + count * esz] = enc * count
                desc.append(f"{count} value(s) = {x!r} at element {start} of a {d['dtype']} dataset (offset {d['offset']})")
        elif op == 6 and dsets:  # data bit flips
            d = rng.choice(dsets)
            o = d["offset"] + rng.randrange(d["nbytes"])
            if o < len(b):
                b[o] ^= 1 << rng.randrange(8)
                desc.append(f"flip data bit at {o}")
        elif op == 7:  # numeric attribute by name
            attrs = (layout or {}).get("attrs", {})
            cands = [(g, k, v) for g, a in attrs.items() for k, v in a.items()]
            if cands:
                g, k, v = rng.choice(cands)
                enc_old = struct.pack("<d", v) if isinstance(v, float) else struct.pack("<q", v)
                if isinstance(v, float):
                    nv = rng.choice([1e300, 0.0, -0.125, math.nan, math.inf, 5e-324, 1e-300, -0.0, 1e20])
                    enc = struct.pack("<d", nv)
                else:
                    nv = rng.choice([2**31 - 1, 2**31, 2**32, -1, 2**63 - 1, -2**63, 1, 0, 2, 10**12, 65, 63])
                    enc = struct.pack("<q", nv)
                hits = [m.start() for m in re.finditer(re.escape(k.encode()), bytes(b))]
                placed = False
                for h in rng.sample(hits, len(hits)):
                    j = bytes(b).find(enc_old, h, h + 160)
                    if j >= 0:
                        b[j:j + 8] = enc
                        desc.append(f"attribute {k} (near offset {h}) = {nv!r}")
                        placed = True
                        break
                if not placed and hits:
                    desc.append(f"attribute {k}: value not found")
        elif op == 8:  # truncate
            n = rng.choice([0, 8, rng.randrange(len(b)), rng.randrange(first_data + 1), len(b) - 1,
                            len(b) - rng.randrange(1, 512)])
            n = max(0, min(len(b), n))
            del b[n:]
            desc.append(f"truncate to {n}")
        elif op == 9:  # append junk
            junk = rng.choice([bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096))), bytes(data[:512]),
                               b"\x00" * 4096, b"\x89HDF\r\n\x1a\n" + b"\xff" * 64])
            b += junk
            desc.append(f"append {len(junk)} junk bytes")
        elif op == 10:  # zero / 0xFF block
            n = rng.choice([16, 64, 256, 512])
            o = rng.randrange(max(1, min(len(b), first_data if rng.random() < 0.6 else len(b))))
            fill = rng.choice([0, 0xFF])
            b[o:o + n] = bytes([fill]) * len(b[o:o + n])
            desc.append(f"{n} bytes at {o} = {fill:#x}")
        elif op == 11:  # superblock fields
            o = rng.choice([8, 9, 10, 11, 12, 13, 14, 15, 16, 20, 24, 28, 32, 40, 48, 56, 64])
            if o + 8 <= len(b):
                v = rng.choice([b"\xff" * 8, b"\x00" * 8, struct.pack("<Q", 2**40), struct.pack("<Q", len(b) * 2),
                                struct.pack("<Q", 1)])
                n = rng.choice([1, 4, 8])
                b[o:o + n] = v[:n]
                desc.append(f"superblock bytes {o}..{o + n} = {v[:n].hex()}")
        else:  # copy a block over another
            n = rng.choice([8, 32, 128])
            if len(b) > 2 * n:
                src = rng.randrange(len(b) - n)
                dst = rng.randrange(min(len(b) - n, max(1, first_data)))
                b[dst:dst + n] = b[src:src + n]
                desc.append(f"copy {n} bytes {src} -> {dst}")
    return bytes(b), desc


# ----------------------------------------------------------------------------------------------
# Corpus and cases

class Corpus:
    def __init__(self, root, work, h5py_python):
        self.root = root
        self.support = {}  # rel path -> bytes (copied into every trial folder)
        self.exps, self.bounds, self.h5 = {}, {}, {}
        self.layouts = {}
        self.outputs = {}
        for dirpath, _, files in os.walk(root):
            for fn in sorted(files):
                full = os.path.join(dirpath, fn)
                rel = os.path.relpath(full, root)
                if fn.endswith(".layout.json"):
                    self.layouts[rel[: -len(".layout.json")]] = json.load(open(full))
                    continue
                if fn in ("README.md",):
                    continue
                data = open(full, "rb").read()
                if rel == "recipes.txt":
                    self.recipes = [l.rstrip("\n") for l in data.decode().splitlines() if l.strip() and not l.startswith("#")]
                    continue
                self.support[rel] = data
                if rel.endswith(".h5") and fn.startswith("outputs-"):
                    self.outputs[rel] = data  # a kernel's outputs (qattn-outputs/1), for `score`
                elif rel.endswith(".h5"):
                    self.h5[rel] = data
                elif fn.startswith("exp-") and fn.endswith(".json"):
                    self.exps[rel] = data.decode()
                elif fn.startswith("bounds-") and fn.endswith(".json"):
                    self.bounds[rel] = data.decode()
        self.exp_names = sorted(self.exps)
        self.bounds_names = sorted(self.bounds)
        self.h5_names = sorted(self.h5)
        self.semantic = []  # (name, bytes, desc, base seed)
        self.base_reports = {}  # exp seed -> {rel path under its output: bytes}
        py = h5py_python
        if py and os.path.exists(py):
            for seed in self.h5_names:
                outdir = os.path.join(work, "h5sem", os.path.basename(seed)[:-3])
                try:
                    r = subprocess.run([py, os.path.join(HERE, "h5_semantic.py"), os.path.join(root, seed), outdir],
                                       capture_output=True, text=True, timeout=300)
                    for m in json.loads(r.stdout):
                        self.semantic.append((f"{os.path.basename(seed)[:-3]}:{m['name']}", open(m["file"], "rb").read(),
                                              m["desc"], seed))
                except Exception as e:  # noqa: BLE001 - optional
                    print(f"fuzz: semantic HDF5 mutants skipped ({e})", file=sys.stderr)
                if not self.layouts.get(seed):
                    try:
                        r = subprocess.run([py, os.path.join(HERE, "h5_semantic.py"), "--layout", os.path.join(root, seed)],
                                           capture_output=True, text=True, timeout=60)
                        self.layouts[seed] = json.loads(r.stdout)
                    except Exception:  # noqa: BLE001
                        pass

    def make_base_reports(self, runner, work):
        """Run each experiment seed once; its report (no PNGs) seeds the --resume cases."""
        for name in self.exp_names:
            tree = jload(self.exps[name])
            out = tree.get("output") if isinstance(tree, Obj) else None
            if not isinstance(out, str):
                continue
            d = os.path.join(work, "base", os.path.basename(name)[:-5])
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            for rel, data in self.support.items():
                write_file(os.path.join(d, rel), data)
            res = runner.execute(["run", name], d)
            rep = os.path.join(d, out)
            if res["rc"] != 0 or not os.path.isdir(rep):
                print(f"fuzz: base run of {name} failed (rc {res['rc']}); --resume cases start from nothing",
                      file=sys.stderr)
                continue
            files = {}
            for dp, _, fs in os.walk(rep):
                for fn in fs:
                    if not fn.endswith(".png"):
                        full = os.path.join(dp, fn)
                        files[os.path.relpath(full, rep)] = open(full, "rb").read()
            self.base_reports[name] = files


def write_file(path, data):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))


def safe_output(tree):
    """The experiment's output folder must stay strictly inside the trial folder (or be absent/invalid)."""
    if not isinstance(tree, Obj):
        return True
    outs = tree.all("output")
    names = tree.all("name")
    cands = [o for o in outs if isinstance(o, str)]
    if not outs:
        cands += ["reports/" + n for n in names if isinstance(n, str)]
    for o in cands:
        o = o.split("\x00")[0]
        if o.startswith("/") or o.startswith("~"):
            return False
        norm = os.path.normpath(os.path.join("T", o))
        if norm == "T" or not norm.startswith("T" + os.sep):
            return False
        if ".." in o.split("/"):
            return False
    return True


def gen_case(corpus, rng, target, i):
    c = {"id": f"t{i:06d}", "index": i, "target": target, "files": {}, "mutations": [], "names": set(),
         "fields": set(SCHEMA_KEYS)}
    if target == "py":
        return surfaces.gen_py(rng, c, corpus, corpus.recipes)
    if target == "names":
        return surfaces.gen_names(rng, c, corpus, jload, jdump)
    if target == "race":
        return surfaces.gen_race(rng, c, corpus)
    if target == "fit":
        return surfaces.gen_fit(rng, c, corpus)
    if target == "recipe":
        line = rng.choice(corpus.recipes)
        if rng.random() < 0.1:
            line = ""
        line, desc = mutate_recipe(rng, line)
        line = line.replace("\x00", "")
        data = rng.choice(corpus.h5_names)
        layer = "0" if rng.random() < 0.5 else "1"
        if rng.random() < 0.05:
            layer = rng.choice(["2", "-1", "01", " 0", "", "abc", "0" * 1000, "\u0661"])
        argv = ["eval", "--data", data, "--layer", layer, "--recipe", line] + (["--json"] if rng.random() < 0.7 else [])
        if rng.random() < 0.25:
            extra = rng.choice([
                ["--tokens", rng.choice(["1", "2", "31", "32", "63", "64", "65", "128", "129", "0", "1000000"])],
                ["--rows", rng.choice(["all", "range:0:16", "range:5:3", "range:0:1000", "sample:4:1", "sample:0:1",
                                       "sample:100000:1", "range:-1:2", "range:", "sample:1:2:3", "range:63:64",
                                       "range:0:4294967297", "sample:2147483648:1"])],
                ["--heads", rng.choice(["0", "1", "2", "7", "-1", "2147483647"])],
                ["--kl-rows", rng.choice(["0", "1", "64", "65", "1000", "-1", "2147483647"])],
                ["--seed", rng.choice(["0", "18446744073709551615"])]])
            argv += extra
            c["mutations"].append("cli " + " ".join(extra))
        c.update(argv=argv, recipe=line, recipe_desc=desc, data=data)
        c["mutations"] += desc
        c["names"] |= {data}
        c["fields"] |= set(RECIPE_KEYS) | {"recipe", "--tokens", "--rows", "--heads", "--kl-rows", "--layer", "layer",
                                           "rows", "tokens", "--seed"}
        c["tokens"] = [t for t in re.split(r"\s+", line) if len(t) >= 3]
        return c

    if target == "exp":
        seed = rng.choice(corpus.exp_names)
        tree = jload(corpus.exps[seed])
        desc = mutate_tree(rng, tree)
        c.update(seed=seed, tree=tree, desc=desc)
        c["mutations"] += [f"seed {seed}"] + desc
        flags = []
        r = rng.random()
        if r < 0.15:
            flags = ["--force"]
        elif r < 0.3:
            flags = ["--resume"]
        elif r < 0.34:
            flags = ["--resume", "--force"]
        elif r < 0.36:
            flags = ["--backend", rng.choice(["gpu", "GPU", "", "cpu"])]
        text_mut = None
        if rng.random() < 0.06:
            text_mut = rng.random()  # applied in render
            flags = [f for f in flags if f != "--force"]
        c.update(flags=flags, text_seed=text_mut)
        out = tree.get("output") if isinstance(tree, Obj) else None
        if "--resume" in flags and isinstance(out, str) and seed in corpus.base_reports and safe_output(tree):
            rep = corpus.base_reports[seed]
            files = dict(rep)
            if rng.random() < 0.5 and "results.jsonl" in files:
                rl = files["results.jsonl"]
                n = rng.randrange(len(rl) + 1)
                files["results.jsonl"] = rl[:n]
                c["mutations"].append(f"resume: report results.jsonl truncated to {n} bytes")
            if rng.random() < 0.2 and "config.json" in files:
                files["config.json"] = files["config.json"][: rng.randrange(len(files["config.json"]) + 1)]
                c["mutations"].append("resume: report config.json truncated")
            c["prefill"] = {os.path.join(out.split("\x00")[0], k): v for k, v in files.items()}
        render_json_case(c, rng)
        return c

    if target == "bounds":
        seed = rng.choice(corpus.bounds_names)
        tree = jload(corpus.bounds[seed])
        desc = mutate_tree(rng, tree, rng.choice([1, 1, 2, 2, 3]))
        c.update(seed=seed, tree=tree, desc=desc, flags=["--update"] if rng.random() < 0.08 else [])
        c["mutations"] += [f"seed {seed}"] + desc
        rep = tree.get("report") if isinstance(tree, Obj) else None
        if isinstance(rep, str) and rng.random() < 0.5:
            rel = os.path.join(rep, "results.jsonl")
            if rel in corpus.support:
                lines = corpus.support[rel].decode().splitlines()
                lines, d = mutate_results(rng, lines)
                c["prefill"] = {rel: ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")}
                c["mutations"] += d
        c["text_seed"] = rng.random() if rng.random() < 0.05 else None
        render_json_case(c, rng)
        return c

    # h5
    if corpus.outputs and rng.random() < 0.15:
        # A kernel's outputs file, mutated, scored against the dump it was written for.
        base = rng.choice(sorted(corpus.outputs))
        ops_seed = rng.random()
        nops = rng.choice([1, 1, 2, 3])
        mdata, desc = h5_mutate(random.Random(ops_seed), corpus.outputs[base], corpus.layouts.get(base), nops)
        c["mutations"] += [f"seed {base}"] + desc
        c["files"]["mut.h5"] = mdata
        c.update(h5_base=corpus.outputs[base], h5_layout=corpus.layouts.get(base), h5_nops=nops, h5_ops_seed=ops_seed, base=base)
        c["argv"] = ["score", "tiny-a.h5", "mut.h5", "--output", "score-report", "--quiet"]
        c["names"] |= {"mut.h5", "score-report"}
        c["fields"] |= set(H5_NAMES) | {"kernel", "recipe", "layers", "o", "rows", "context"}
        return c
    if corpus.semantic and rng.random() < 0.4:
        name, data, sdesc, base = rng.choice(corpus.semantic)
        c["mutations"].append(f"semantic {name}: {sdesc}")
        nops = rng.choice([0, 0, 1])
    else:
        base = rng.choice(corpus.h5_names)
        data = corpus.h5[base]
        c["mutations"].append(f"seed {base}")
        nops = rng.choice([1, 1, 2, 3])
    ops_seed = rng.random()
    mdata, desc = h5_mutate(random.Random(ops_seed), data, corpus.layouts.get(base), nops)
    c["mutations"] += desc
    fn = "mut.h5"
    c["files"][fn] = mdata
    c.update(h5_base=data, h5_layout=corpus.layouts.get(base), h5_nops=nops, h5_ops_seed=ops_seed, base=base)
    r = rng.random()
    if r < 0.5:
        argv = ["inspect", fn] + (["--tokens", rng.choice(["1", "16", "63", "64", "65", "0"])] if rng.random() < 0.2 else [])
    elif r < 0.95:
        argv = ["eval", "--data", fn, "--layer", rng.choice(["0", "1", "0", "1", "2"]), "--recipe",
                rng.choice(corpus.recipes), "--json"]
    else:
        exp = jload(corpus.exps[corpus.exp_names[0]])
        for p in exp.pairs:
            if p[0] == "dataset":
                p[1] = fn
        c["files"]["exp.json"] = jdump(exp, indent=2)
        argv = ["run", "exp.json"]
        c["tree"] = exp
    c["argv"] = argv
    c["names"] |= {fn, "exp.json"}
    c["fields"] |= set(H5_NAMES) | set(RECIPE_KEYS) | {"recipe", "--tokens"}
    return c


def mutate_results(rng, lines):
    desc = []
    for _ in range(rng.choice([1, 1, 2])):
        op = rng.randrange(7)
        if not lines:
            lines = ["{}"]
        i = rng.randrange(len(lines))
        if op == 0:
            del lines[i]
            desc.append(f"results.jsonl: delete line {i}")
        elif op == 1:
            lines.insert(i, lines[i])
            desc.append(f"results.jsonl: duplicate line {i}")
        elif op == 2:
            n = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:n]
            desc.append(f"results.jsonl: truncate line {i} at {n}")
        elif op == 3:
            lines.insert(i, rng.choice(["", " ", "junk", "[]", "null", "{}", "\r", '{"recipe": 1}']))
            desc.append(f"results.jsonl: junk line at {i}")
        else:
            try:
                t = jload(lines[i])
            except Exception:  # noqa: BLE001
                continue
            if not isinstance(t, Obj):
                continue
            k = rng.choice(["sqnr_db", "kl_mean", "context", "layer", "recipe", "kernel_vs_recipe_sqnr_db", "head"])
            v = rng.choice(["nan", "inf", "-inf", None, "x", Raw("1e309"), Raw("NaN"), 2**40, "32", 0, -1e308, 1e308,
                            True, [], 32.5, "\u00e9"])
            if rng.random() < 0.2:
                t.pairs = [p for p in t.pairs if p[0] != k]
                desc.append(f"results.jsonl line {i}: delete {k}")
            else:
                found = False
                for p in t.pairs:
                    if p[0] == k:
                        p[1] = v
                        found = True
                if not found:
                    t.pairs.append([k, v])
                desc.append(f"results.jsonl line {i}: {k} = {short(v)}")
            lines[i] = jdump(t)
    return lines, desc


def render_json_case(c, rng):
    tree = c["tree"]
    fn = "exp.json" if c["target"] == "exp" else "bounds.json"
    text = jdump(tree, ascii_=rng.random() < 0.7, indent=rng.choice([0, 2]))
    if c.get("text_seed") is not None:
        text, d = text_mutate(random.Random(c["text_seed"]), text)
        c["mutations"].append("text: " + d)
    c["files"][fn] = text.encode("utf-8", "surrogatepass")
    c["argv"] = (["run", fn] if c["target"] == "exp" else ["check", fn]) + c.get("flags", [])
    c["names"] |= {fn}
    c["fields"] |= {str(k) for k in tree_keys(tree)} | set(RECIPE_KEYS)
    c["names"] |= {s.split("\x00")[0] for s in tree_strings(tree) if 0 < len(s) < 300 and s.strip()
                   and (s.endswith((".h5", ".json", ".jsonl")) or "report" in s or "/" in s)}
    if isinstance(tree, Obj):  # the paths the file names are inputs too
        for k in ("output", "dataset", "experiment", "report"):
            for o in tree.all(k):
                if isinstance(o, str) and o.split("\x00")[0].strip() and len(o) < 100000:
                    c["names"].add(o.split("\x00")[0])
    if c["target"] == "exp" and not safe_output(tree):
        c["unsafe"] = True


# ----------------------------------------------------------------------------------------------
# Running and classifying

class Runner:
    def __init__(self, exe, timeout, mem_mb, python=None, pythonpath=None, python_preload=""):
        self.exe, self.timeout, self.mem_mb = exe, timeout, mem_mb
        self.python, self.pythonpath, self.python_preload = python, pythonpath, python_preload

    def env(self, cwd):
        env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=os.path.join(cwd, "tmp"), LC_ALL="C", MPLBACKEND="Agg",
                   HDF5_USE_FILE_LOCKING="FALSE", OPENBLAS_NUM_THREADS="1")
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        os.makedirs(env["TMPDIR"], exist_ok=True)
        return env

    def limits(self):
        os.setsid()
        if self.mem_mb:
            m = self.mem_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (m, m))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        f = 512 * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (f, f))

    def execute(self, args, cwd, exe=None):
        env = self.env(cwd)
        if exe and exe == self.python and self.python_preload:  # an instrumented module in a plain interpreter
            env["LD_PRELOAD"] = self.python_preload
        t0 = time.monotonic()
        p = subprocess.Popen([exe or self.exe] + args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, preexec_fn=self.limits)
        hang = False
        try:
            out, err = p.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            hang = True
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = p.communicate()
        return {"rc": p.returncode, "stdout": out.decode("utf-8", "replace"), "stderr": err.decode("utf-8", "replace"),
                "hang": hang, "elapsed": time.monotonic() - t0}


NAN_TOKEN = re.compile(r"(?<![\w./:=+\-])[-+]?(?:nan(?:\([\w]*\))?|inf(?:inity)?)(?![\w./:=\-(])", re.I)


# nlohmann::json dumps a NaN or infinite double as null: a null in one of these metric fields is a
# NaN/inf result in disguise (kl_mean / tv_mean may be null when no KL rows were asked for).
NULL_METRICS = {"sqnr_db", "rel_l2", "rel_l1", "cosine", "max_abs", "mean_head_sqnr_db", "kl_mean", "tv_mean",
                "kernel_vs_recipe_sqnr_db", "ratio_raw", "ratio_smoothed", "levels_raw", "levels_smoothed", "mass"}


def json_nans(v, path="", key="", kl_null_ok=False):
    out = []
    if isinstance(v, dict):
        if "kl_rows" in v and v.get("kl_rows") == 0:
            kl_null_ok = True
        for k, x in v.items():
            out += json_nans(x, f"{path}.{k}" if path else k, k, kl_null_ok)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += json_nans(x, f"{path}[{i}]", key, kl_null_ok)
    elif v is None and key in NULL_METRICS and not (kl_null_ok and key in ("kl_mean", "tv_mean")):
        out.append(f"{path} = null (a NaN/inf metric dumped as null)")
    elif isinstance(v, float) and not math.isfinite(v):
        out.append(f"{path} = {v} (a bare NaN/Infinity literal)")
    elif isinstance(v, str):
        s = v.strip().lower()
        # A positive "inf" is a value in a dB field (an exact match) and in a channel ratio (over half
        # the channels zero, one not: the ratio is unbounded); a NaN never is.
        inf_ok = str(key).endswith("_db") or str(key).startswith("ratio_") or str(key).startswith("channel_ratio")
        if s in ("nan", "-nan", "+nan", "-inf", "-infinity") or (s in ("inf", "+inf", "infinity") and not inf_ok):
            out.append(f"{path} = {v!r}")
    return out


def text_nans(text, where):
    """Text: a NaN/inf token; a positive inf is accepted on a line about dB, or in a whitespace table
    column whose header (the last line naming sqnr_db) is a dB column."""
    out, header = [], None
    for ln, line in enumerate(text.splitlines()):
        if "sqnr_db" in line.lower():
            header = line.split()
        for m in NAN_TOKEN.finditer(line):
            tok = m.group(0).lower()
            # A failure's reason names the value it found ("channel 0 is NaN"): words, not a metric.
            if re.search(r"\bis\s*$", line[:m.start()]):
                continue
            if tok.lstrip("+") in ("inf", "infinity"):
                if "db" in line.lower():
                    continue
                cells = line.split()
                if header and len(cells) == len(header):
                    j = next((k for k, x in enumerate(cells) if x.lower() == tok), None)
                    if j is not None and "db" in header[j].lower():
                        continue
            out.append(f"{where}:{ln + 1}: {line.strip()[:160]}")
            break
    return out


def csv_nans(text, where):
    out = []
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error:
        return text_nans(text, where)
    if not rows:
        return out
    head = rows[0]
    for r_i, row in enumerate(rows[1:], 2):
        for j, cell in enumerate(row):
            s = cell.strip().lower()
            if re.fullmatch(r"[-+]?(nan(\(\w*\))?|inf(inity)?)", s):
                col = head[j] if j < len(head) else ""
                if s.lstrip("+") in ("inf", "infinity") and ("db" in col.lower() or "ratio" in col.lower()):
                    continue
                out.append(f"{where}:{r_i}: column {col!r} = {cell}")
    return out


def md_nans(text, where):
    """Markdown: table cells by their column header ('inf' allowed under a dB column); other lines as text."""
    out, head, block = [], None, []

    def flush():
        if block:
            for x in text_nans("\n".join(l for _, l in block), where):
                w, n, rest = x.split(":", 2)
                out.append(f"{w}:{block[int(n) - 1][0]}:{rest}")
            block.clear()

    for ln, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            block.append((ln, line))
            head = None
            continue
        flush()
        if line.startswith("|"):
            cells = [x.strip() for x in line.strip().strip("|").split("|")]
            if head is None:
                head = cells
                continue
            if all(re.fullmatch(r":?-*:?", x) for x in cells):
                continue
            for j, cell in enumerate(cells):
                s = cell.strip().lower()
                if re.fullmatch(r"[-+]?(nan(\(\w*\))?|inf(inity)?)", s):
                    col = head[j] if j < len(head) else ""
                    if s.lstrip("+") in ("inf", "infinity") and "db" in col.lower():
                        continue
                    out.append(f"{where}:{ln}: column {col!r} = {cell}")
    flush()
    return out


def find_nans(c, res, cwd):
    found = []
    if res["stdout"]:
        if "--json" in c["argv"]:
            try:
                found += json_nans(json.loads(res["stdout"]), "stdout")
            except ValueError:
                found += md_nans(res["stdout"], "stdout")
        else:
            found += md_nans(res["stdout"], "stdout")
    tree = c.get("tree")
    out = tree.get("output") if isinstance(tree, Obj) else None
    if c["argv"][0] == "run" and isinstance(out, str):
        rep = os.path.join(cwd, out.split("\x00")[0])
        if os.path.isdir(rep):
            for dp, _, fs in os.walk(rep):
                for fn in sorted(fs):
                    full = os.path.join(dp, fn)
                    rel = os.path.relpath(full, cwd)
                    if fn.endswith(".png") or os.path.getsize(full) > 20 * 1024 * 1024:
                        continue
                    text = open(full, "rb").read().decode("utf-8", "replace")
                    if fn.endswith(".jsonl"):
                        # KL is absent by design when the run asked for no KL rows: the resolved
                        # config says so (1e-400 in the file reads as 0).
                        kl0 = isinstance(tree.get("kl_rows"), int) and tree.get("kl_rows") == 0
                        try:
                            kl0 = kl0 or json.load(open(os.path.join(rep, "config.json"))).get("kl_rows") == 0
                        except (OSError, ValueError, AttributeError):
                            pass
                        for ln, line in enumerate(text.splitlines()):
                            try:
                                found += [f"{rel}:{ln + 1}: {x}" for x in json_nans(json.loads(line), kl_null_ok=kl0)]
                            except ValueError:
                                found += text_nans(line, f"{rel}:{ln + 1}")
                    elif fn.endswith(".json"):
                        try:
                            found += [f"{rel}: {x}" for x in json_nans(json.loads(text))]
                        except ValueError:
                            found += text_nans(text, rel)
                    elif fn.endswith(".csv"):
                        found += csv_nans(text, rel)
                    elif fn.endswith(".md"):
                        found += md_nans(text, rel)
    return found


def error_message(stderr):
    lines = [l for l in stderr.splitlines() if l.strip()]
    pick = [l for l in lines if l.startswith("qattn: error") or l.startswith("FAIL")]
    if pick:
        return " | ".join(pick[:3])
    return " | ".join(lines[-2:]) if lines else "(no stderr)"


def names_field(msg, c):
    for k in c["fields"]:
        if not k:
            continue
        if f"'{k}" in msg or f'"{k}' in msg or f"`{k}" in msg or f"{k}=" in msg or re.search(rf"(^|[\s(,:]){re.escape(k)}[.\[]", msg):
            return True
        if (k in WORD_KEYS or "_" in k or "." in k) and re.search(rf"(?<![\w]){re.escape(k)}(?![\w])", msg):
            return True
    for t in c.get("tokens", []):
        if t in msg:
            return True
    # A command-line option the trial passed (--backend, --rows), named as the user typed it.
    for a in c.get("argv", []):
        if isinstance(a, str) and a.startswith("--") and len(a) > 2 and a in msg:
            return True
    return bool(re.search(r"/layers(/|\b)|\bjson path\b|\[\d+\]", msg))


def names_input(msg, c):
    for n in c["names"]:
        n = n.split("\x00")[0]
        if not n.strip():
            continue
        if n in msg or (len(os.path.basename(n.rstrip("/"))) >= 3 and os.path.basename(n.rstrip("/")) in msg):
            return True
    return False


def normalize(msg, c):
    m = msg
    for n in sorted((x for x in c["names"] if len(x) >= 3), key=len, reverse=True):
        m = m.replace(n, "FILE")
    m = re.sub(r"/tmp/[^\s:'\"]+", "TMP", m)
    m = re.sub(r"; last read: .*", "", m)
    m = re.sub(r"'[^']*'", "'S'", m)
    m = re.sub(r'"[^"]*"', '"S"', m)
    m = re.sub(r"0x[0-9a-fA-F]+", "H", m)
    m = re.sub(r"[-+]?\d+(\.\d+)?([eE][-+]?\d+)?", "N", m)
    m = re.sub(r"\s+", " ", m).strip()
    return m[:220]


def classify(c, res, cwd):
    rc, err = res["rc"], res["stderr"]
    if res["hang"]:
        prog = len(re.findall(r"^\[\d+/\d+\]", res["stdout"] + "\n" + err, re.M))
        return "hang", f"timeout after {res['elapsed']:.0f} s ({prog} progress lines seen)", f"hang: {c['argv'][0]}"
    marker = next((m for m in CRASH_MARKERS if m in err), None)
    if rc is not None and rc < 0:
        sig = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        what = [l for l in err.splitlines() if "what()" in l or "terminate" in l or "ERROR:" in l or "runtime error" in l]
        msg = f"signal {sig}: " + (" | ".join(what[:2]) if what else error_message(err))
        # A bare signal says little: tag it with the kind of mutation, so that distinct causes are
        # minimized and reported apart.
        muts = " ".join(c.get("mutations", []))
        tags = [t for t, hit in (("deep nesting", "depth" in muts),
                                 ("mutated report", "results.jsonl" in muts or "resume:" in muts),
                                 ("semantic HDF5", "semantic " in muts)) if hit]
        return "crash", msg, c["argv"][0] + ": " + normalize(msg, c) + (f" [{', '.join(tags)}]" if tags else "")
    found = surfaces.check(c, res, cwd) if c["target"] in surfaces.TARGETS else None
    if found:
        return found[0], found[1], f"{c['target']}: " + normalize(found[1], c)
    if rc not in (0, 1, 2):
        tag = f"cli11 exit {rc}" if "Run with --help" in err else f"exit {rc}"
        msg = f"{tag}: {error_message(err)}"
        return "crash", msg, normalize(msg, c)
    if marker:
        msg = f"stderr '{marker}': {error_message(err)}"
        return "crash", msg, normalize(msg, c)
    if rc == 0:
        nans = find_nans(c, res, cwd)
        if nans:
            msg = "; ".join(nans[:3])
            norm = "nan: " + normalize(re.sub(r":\d+:", ":", nans[0]), c)
            return "nan", msg, norm
        return "ok", "", ""
    msg = error_message(err)
    if c["target"] == "py" and "incompatible function arguments" in msg:
        return "error", msg, normalize(msg, c)  # nanobind's TypeError: the signature and the type given, per argument
    internal = [m for m in INTERNAL_MARKERS if m in msg] + INTERNAL_RE.findall(msg)
    if internal:
        return "unclear", f"internal text {internal[0]!r}: {msg}", normalize(msg, c)
    if not names_input(msg, c) and not names_field(msg, c):
        return "unclear", f"names no input file or field: {msg}", normalize(msg, c)
    return "error", msg, normalize(msg, c)


def prepare(corpus, c, tdir):
    shutil.rmtree(tdir, ignore_errors=True)
    os.makedirs(tdir)
    for rel, data in corpus.support.items():
        write_file(os.path.join(tdir, rel), data)
    for rel, data in c.get("prefill", {}).items():
        try:
            write_file(os.path.join(tdir, rel), data)
        except OSError:  # e.g. an output folder name too long for the file system
            pass
    for rel, data in c["files"].items():
        write_file(os.path.join(tdir, rel), data)


def run_case(corpus, runner, c, work, keep=False):
    tdir = os.path.join(work, "trials", c["id"])
    if c.get("unsafe"):
        return {"class": "skipped", "msg": "output folder outside the trial folder", "norm": "", "rc": None,
                "elapsed": 0.0, "stderr": "", "hang": False}
    prepare(corpus, c, tdir)
    # One argument longer than the kernel passes (128 KiB, MAX_ARG_STRLEN): no shell could run it.
    if any(len(x.encode("utf-8", "surrogatepass")) >= 128 * 1024 for x in c["argv"]):
        return {"class": "skipped", "msg": "an argument longer than exec() accepts", "norm": "", "rc": None,
                "elapsed": 0.0, "stderr": "", "hang": False}
    if c["target"] == "race":
        res = surfaces.run_race(runner, c, tdir)
    else:
        res = runner.execute(c["argv"], tdir, runner.python if c.get("exe_kind") == "python" else None)
    cls, msg, norm = classify(c, res, tdir)
    res.update({"class": cls, "msg": msg, "norm": norm})
    if not keep:
        shutil.rmtree(tdir, ignore_errors=True)
    return res


def needed_support(corpus, c):
    """Support files a reproducer needs: those named (transitively) by the case's argv and files."""
    texts = [" ".join(c["argv"])] + [(d.decode("utf-8", "replace") if isinstance(d, bytes) else d)
                                     for d in c["files"].values() if len(d) < 2_000_000]
    need, frontier = set(), list(texts)
    while frontier:
        t = frontier.pop()
        for rel, data in corpus.support.items():
            top = rel.split(os.sep)[0]
            if rel not in need and (rel in t or (top != rel and top in t)):
                need.add(rel)
                if not rel.endswith(".h5"):
                    frontier.append(data.decode("utf-8", "replace"))
    return need


def write_repro(corpus, c, res, d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for rel in sorted(needed_support(corpus, c)):
        write_file(os.path.join(d, rel), corpus.support[rel])
    for rel, data in c.get("prefill", {}).items():
        try:
            write_file(os.path.join(d, rel), data)
        except OSError:
            pass
    for rel, data in c["files"].items():
        write_file(os.path.join(d, rel), data)
    argv = list(c["argv"])
    if c["target"] == "recipe":
        write_file(os.path.join(d, "recipe.txt"), c["recipe"])
        cmd_args = " ".join('"$(cat recipe.txt)"' if a == c["recipe"] and k > 0 and argv[k - 1] == "--recipe"
                            else shlex.quote(a) for k, a in enumerate(argv))
    else:
        cmd_args = " ".join(shlex.quote(a) for a in argv)
    lines = ["#!/bin/sh", f"# qattn fuzz reproducer {c['id']}: target {c['target']}, class {res['class']}",
             "# message: " + res["msg"][:400].replace("\n", " "), "# mutations:"]
    lines += ["#   " + m[:200].replace("\n", "\\n") for m in c["mutations"]]
    if c.get("exe_kind") == "python":
        run = f'PYTHONPATH={shlex.quote(corpus.pythonpath or "")} {shlex.quote(corpus.python or "python3")} {cmd_args}'
    elif c["target"] == "race":
        r = c["race"]
        run = (f'"$QATTN" {cmd_args} {" ".join(r["first"])} & sleep {r["delay"]:.2f}; '
               + ("kill -9 $!; " if r["kill_first"] else "") + f'"$QATTN" {cmd_args} {" ".join(r["second"])}; wait')
    else:
        run = f'"$QATTN" {cmd_args}'
    lines += ['cd "$(dirname "$0")"', f'QATTN="${{QATTN:-{os.path.abspath(corpus.exe)}}}"',
              'mkdir -p tmp', f'OMP_NUM_THREADS=1 TMPDIR="$PWD/tmp" {run}', ""]
    write_file(os.path.join(d, "cmd.sh"), "\n".join(lines))
    os.chmod(os.path.join(d, "cmd.sh"), 0o755)


def minimize(corpus, runner, c, res, work, budget):
    """Greedy deletion keeping (class, normalized message). Returns a reduced case or None."""
    if c["target"] in surfaces.TARGETS:
        return None  # their reproducers are small already (one call, one experiment, one pair of commands)
    want = (res["class"], res["norm"])
    runs = [0]

    def same(cc):
        if runs[0] >= budget:
            return False
        runs[0] += 1
        r = run_case(corpus, runner, cc, work)
        return (r["class"], r["norm"]) == want

    if c["target"] == "recipe":
        toks = c["recipe"].split(" ")
        i = 0
        while i < len(toks) and runs[0] < budget:
            t2 = toks[:i] + toks[i + 1:]
            cc = dict(c, recipe=" ".join(t2), argv=[(" ".join(t2) if a == c["recipe"] else a) for a in c["argv"]],
                      id=c["id"] + "m")
            cc["tokens"] = [t for t in t2 if len(t) >= 3]
            if same(cc):
                toks = t2
            else:
                i += 1
        line = " ".join(toks)
        out = dict(c, recipe=line, argv=[(line if a == c["recipe"] else a) for a in c["argv"]])
        return out
    if c["target"] in ("exp", "bounds") and c.get("text_seed") is None and "tree" in c:
        tree = copy_tree(c["tree"])
        changed = True
        while changed and runs[0] < budget:
            changed = False
            ss = slots(tree)
            for cont, idx, path, key in ss:
                if key in ("output",):
                    continue
                t2 = copy_tree(tree)
                s2 = slots(t2)
                match = [s for s in s2 if s[2] == path]
                if not match:
                    continue
                c2, i2 = match[0][0], match[0][1]
                if isinstance(c2, Obj):
                    del c2.pairs[i2]
                else:
                    del c2[i2]
                cc = dict(c, tree=t2, files={}, id=c["id"] + "m", names=set(c["names"]), fields=set(c["fields"]))
                render_json_case_min(cc)
                if cc.get("unsafe"):
                    continue
                if same(cc):
                    tree = t2
                    changed = True
                    break
                if runs[0] >= budget:
                    break
        cc = dict(c, tree=tree, files={}, names=set(c["names"]), fields=set(c["fields"]))
        render_json_case_min(cc)
        pre = dict(c.get("prefill", {}))
        rl = [k for k in pre if k.endswith("results.jsonl")] if c["target"] == "bounds" else []
        if rl:  # greedy deletion of the mutated report's lines
            lines = pre[rl[0]].decode("utf-8", "replace").splitlines()
            i = 0
            while i < len(lines) and runs[0] < budget:
                l2 = lines[:i] + lines[i + 1:]
                c3 = dict(cc, prefill={rl[0]: ("\n".join(l2) + "\n").encode()}, id=c["id"] + "m")
                if same(c3):
                    lines = l2
                else:
                    i += 1
            pre[rl[0]] = ("\n".join(lines) + "\n").encode()
            cc["min_desc_extra"] = [f"{rl[0]} ({len(lines)} lines): " + " / ".join(l[:300] for l in lines[:3])]
        cc["prefill"] = pre
        return cc
    if c["target"] == "h5" and "h5_base" in c:
        base, mut = c["h5_base"], c["files"]["mut.h5"]
        n = min(len(base), len(mut))
        ranges, i = [], 0
        while i < n:  # maximal runs of changed bytes, merged across gaps under 8 bytes
            if base[i] != mut[i]:
                j = i
                while j < n and (base[j] != mut[j] or any(base[k] != mut[k] for k in range(j, min(n, j + 8)))):
                    j += 1
                ranges.append((i, j))
                i = j
            else:
                i += 1
        cur = bytearray(mut)
        if len(mut) != len(base):  # try undoing the truncation / junk first
            trial = bytearray(cur[:n]) + (base[n:] if len(base) > n else b"")
            cc = dict(c, files=dict(c["files"], **{"mut.h5": bytes(trial)}), id=c["id"] + "m")
            if same(cc):
                cur = trial
        for a_, b_ in ranges:
            if runs[0] >= budget:
                break
            trial = bytearray(cur)
            trial[a_:b_] = base[a_:b_]
            cc = dict(c, files=dict(c["files"], **{"mut.h5": bytes(trial)}), id=c["id"] + "m")
            if same(cc):
                cur = trial
        left = []
        m = min(len(base), len(cur))
        i = 0
        while i < m:
            if base[i] != cur[i]:
                j = i
                while j < m and base[j] != cur[j] and j - i < 16:
                    j += 1
                left.append(f"offset {i}: {bytes(base[i:j]).hex()} -> {bytes(cur[i:j]).hex()}")
                i = j
            else:
                i += 1
        if len(cur) != len(base):
            left.append(f"length {len(base)} -> {len(cur)}")
        sem = [x for x in c["mutations"] if x.startswith("semantic ") or x.startswith("seed ")]
        out = dict(c, files=dict(c["files"], **{"mut.h5": bytes(cur)}))
        out["min_desc"] = sem + left[:20] + ([f"... {len(left) - 20} more"] if len(left) > 20 else [])
        return out
    return None


def render_json_case_min(c):
    fn = "exp.json" if c["target"] == "exp" else "bounds.json"
    if c["target"] == "h5":
        fn = "exp.json"
    text = jdump(c["tree"], indent=0)
    c["files"] = dict(c["files"])
    c["files"][fn] = text.encode("utf-8", "surrogatepass")
    c["fields"] |= {str(k) for k in tree_keys(c["tree"])}
    if c["target"] == "exp" and not safe_output(c["tree"]):
        c["unsafe"] = True


# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exe", default=os.path.join(REPO, "build", "harness", "qattn"))
    ap.add_argument("--mutations", "-n", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "qattn-fuzz"))
    ap.add_argument("--corpus", default=os.path.join(HERE, "corpus"))
    ap.add_argument("--jobs", "-j", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--mem-mb", type=int, default=4096, help="RLIMIT_AS of each child (0 = none)")
    ap.add_argument("--targets", default="exp,bounds,recipe,h5,py,names,race,fit")
    ap.add_argument("--weights", default="exp:0.2,bounds:0.1,recipe:0.25,h5:0.15,py:0.2,names:0.04,race:0.04,fit:0.04")
    ap.add_argument("--python", default=os.path.join(REPO, ".venv", "bin", "python"),
                    help="the Python with numpy for the py target (qattn from EXE's build: BUILD/python)")
    ap.add_argument("--python-preload", default="",
                    help="LD_PRELOAD for the py target's interpreter (the sanitizers' runtimes, for an instrumented module)")
    ap.add_argument("--py-no-mid-views", action="store_true",
                    help="py target: no array views of a few GB (for runs without --mem-mb, e.g. under the sanitizers)")
    ap.add_argument("--h5py", default=os.path.join(REPO, ".venv-dump", "bin", "python"),
                    help="a Python with h5py for the semantic HDF5 mutants ('' = none)")
    ap.add_argument("--no-copy-exe", action="store_true", help="run EXE in place (default: copy it to OUT/work/qattn)")
    ap.add_argument("--no-minimize", action="store_true")
    ap.add_argument("--minimize-runs", type=int, default=30)
    ap.add_argument("--max-repro-per-class", type=int, default=10)
    ap.add_argument("--progress", type=int, default=200)
    ap.add_argument("--keep-trials", action="store_true")
    a = ap.parse_args()

    out = os.path.abspath(a.out)
    work = os.path.join(out, "work")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "repro"))
    os.makedirs(work)
    exe = os.path.abspath(a.exe)
    if not os.access(exe, os.X_OK):
        sys.exit(f"fuzz: {exe} is not an executable")
    if not a.no_copy_exe:
        shutil.copy2(exe, os.path.join(work, "qattn"))
        exe = os.path.join(work, "qattn")
    pythonpath = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(a.exe))), "python")
    runner = Runner(exe, a.timeout, a.mem_mb, a.python, pythonpath, a.python_preload)
    t_start = time.monotonic()
    corpus = Corpus(os.path.abspath(a.corpus), work, a.h5py)
    corpus.exe = exe
    corpus.python, corpus.pythonpath = a.python, pythonpath
    corpus.py_no_mid_views = a.py_no_mid_views
    corpus.make_base_reports(runner, work)
    targets = [t for t in a.targets.split(",") if t]
    w = dict((kv.split(":")[0], float(kv.split(":")[1])) for kv in a.weights.split(","))
    weights = [w.get(t, 0.1) for t in targets]
    print(f"fuzz: {a.mutations} mutations, seed {a.seed}, targets {targets}, exe {exe}, out {out}; corpus: "
          f"{len(corpus.exp_names)} experiments, {len(corpus.bounds_names)} bounds, {len(corpus.recipes)} recipes, "
          f"{len(corpus.h5_names)} dumps, {len(corpus.semantic)} semantic HDF5 mutants", file=sys.stderr)

    cases = []
    for i in range(a.mutations):
        rng = random.Random(f"{a.seed}:{i}")
        t = rng.choices(targets, weights)[0]
        cases.append((i, t))

    stats = {t: {"cases": 0, "ok": 0, "error": 0, "crash": 0, "hang": 0, "nan": 0, "lost": 0, "unclear": 0, "skipped": 0,
                 "messages": {}} for t in targets}
    classes = {}  # (target, class, norm) -> info
    findings = open(os.path.join(out, "findings.jsonl"), "w")
    totals = {"crash": 0, "hang": 0, "nan": 0, "lost": 0, "unclear": 0}

    def one(item):
        i, t = item
        rng = random.Random(f"{a.seed}:{i}")
        rng.random()  # the draw that picked the target
        try:
            c = gen_case(corpus, rng, t, i)
            return c, run_case(corpus, runner, c, work, a.keep_trials)
        except Exception as e:  # a fuzzer bug: report it, count the trial as skipped
            import traceback
            print(f"fuzz: internal error in trial {i} ({t}): {e}\n{traceback.format_exc(limit=3)}", file=sys.stderr)
            return {"id": f"t{i:06d}", "target": t, "mutations": []}, {"class": "skipped", "msg": str(e), "norm": "",
                                                                        "rc": None, "elapsed": 0, "stderr": ""}

    def record(c, res):
        t = c["target"]
        st = stats[t]
        st["cases"] += 1
        st[res["class"]] += 1
        if res["class"] in ("ok", "skipped"):
            return
        m = st["messages"].setdefault(res["norm"], {"count": 0, "class": res["class"], "example": res["msg"][:300]})
        m["count"] += 1
        if res["class"] == "error":
            return
        totals[res["class"]] += 1
        key = (t, res["class"], res["norm"])
        info = classes.setdefault(key, {"target": t, "class": res["class"], "norm": res["norm"], "count": 0,
                                        "first": c["id"], "message": res["msg"][:500], "case": c, "res": res})
        info["count"] += 1
        rep = None
        if a.max_repro_per_class == 0 or info["count"] <= a.max_repro_per_class:
            rep = os.path.join("repro", c["id"])
            write_repro(corpus, c, res, os.path.join(out, rep))
        findings.write(json.dumps({
            "id": c["id"], "target": t, "class": res["class"], "rc": res["rc"], "elapsed_s": round(res["elapsed"], 3),
            "argv": [x if len(x) < 400 else x[:400] + f"...({len(x)} chars)" for x in c["argv"]],
            "mutations": [m_[:300] for m_ in c["mutations"]], "message": res["msg"][:1000], "norm": res["norm"],
            "stderr_tail": res["stderr"][-1500:], "repro": rep}) + "\n")
        findings.flush()

    done = 0
    items = iter(cases)
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        while True:
            batch = [x for _, x in zip(range(max(1, a.jobs) * 4), items)]
            if not batch:
                break
            for c, res in ex.map(one, batch):
                record(c, res)
                done += 1
                if a.progress and done % a.progress == 0:
                    el = time.monotonic() - t_start
                    print(f"fuzz: {done}/{a.mutations} trials, {el:.0f} s, crash {totals['crash']} hang {totals['hang']} "
                          f"nan {totals['nan']} lost {totals['lost']} unclear {totals['unclear']}, {len(classes)} distinct", file=sys.stderr,
                          flush=True)
    findings.close()

    # Minimize the first finding of each class (serially, deterministic).
    minimized = []
    if not a.no_minimize:
        for key, info in sorted(classes.items(), key=lambda kv: kv[1]["first"]):
            if info["class"] == "hang":
                continue
            mc = minimize(corpus, runner, info["case"], info["res"], work, a.minimize_runs)
            if mc is None:
                continue
            r = run_case(corpus, runner, mc, work)
            if (r["class"], r["norm"]) != (info["class"], info["norm"]):
                continue
            d = os.path.join("repro", info["first"] + "-min")
            write_repro(corpus, mc, r, os.path.join(out, d))
            info["min_repro"] = d
            info["min_argv"] = mc["argv"]
            if mc["target"] in ("exp", "bounds") and "tree" in mc:
                txt = jdump(mc["tree"])
                info["min_input"] = txt if len(txt) < 600 else txt[:600] + f"...({len(txt)} chars)"
                if mc.get("min_desc_extra"):
                    info["min_input"] += " + " + "; ".join(mc["min_desc_extra"])
                elif mc.get("prefill"):
                    info["min_input"] += " + prefilled report: " + "; ".join(
                        m_ for m_ in mc["mutations"] if m_.startswith(("resume:", "results.jsonl")))
            elif mc["target"] == "recipe":
                info["min_input"] = mc["recipe"] if len(mc["recipe"]) < 600 else mc["recipe"][:600] + "..."
            elif "min_desc" in mc:
                info["min_input"] = "; ".join(mc["min_desc"])
            minimized.append(d)

    elapsed = time.monotonic() - t_start
    summary = {"exe": a.exe, "seed": a.seed, "mutations": a.mutations, "elapsed_s": round(elapsed, 1),
               "timeout_s": a.timeout, "mem_mb": a.mem_mb, "targets": {}, "classes": []}
    for t, st in stats.items():
        msgs = sorted(st["messages"].items(), key=lambda kv: (-kv[1]["count"], kv[0]))
        summary["targets"][t] = {k: v for k, v in st.items() if k != "messages"}
        summary["targets"][t]["top_findings"] = [
            {"count": m["count"], "class": m["class"], "norm": n, "example": m["example"]}
            for n, m in msgs if m["class"] != "error"][:12]
        summary["targets"][t]["top_errors"] = [
            {"count": m["count"], "norm": n} for n, m in msgs if m["class"] == "error"][:6]
    for key, info in sorted(classes.items(), key=lambda kv: (kv[1]["target"], kv[1]["class"], -kv[1]["count"])):
        e = {k: info[k] for k in ("target", "class", "count", "first", "norm", "message")}
        for k in ("min_repro", "min_argv", "min_input"):
            if k in info:
                e[k] = info[k] if k != "min_argv" else [x if len(x) < 300 else x[:300] + "..." for x in info[k]]
        e["first_mutations"] = [m[:200] for m in info["case"]["mutations"]]
        summary["classes"].append(e)
    json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)

    p = lambda s="": print(s, file=sys.stderr)
    p(f"\nfuzz: {a.mutations} trials in {elapsed:.0f} s (seed {a.seed}); findings: {os.path.join(out, 'findings.jsonl')}")
    p(f"{'target':8} {'cases':>6} {'ok':>6} {'error':>6} {'crash':>6} {'hang':>5} {'nan':>5} {'lost':>5} {'unclear':>7} {'skipped':>7}")
    for t, st in stats.items():
        p(f"{t:8} {st['cases']:6} {st['ok']:6} {st['error']:6} {st['crash']:6} {st['hang']:5} {st['nan']:5} {st['lost']:5} "
          f"{st['unclear']:7} {st['skipped']:7}")
    for t in stats:
        top = summary["targets"][t]["top_findings"]
        if top:
            p(f"\n{t}: top distinct finding messages")
            for m in top[:8]:
                p(f"  {m['count']:5} {m['class']:7} {m['norm'][:150]}")
    p(f"\ndistinct classes: {len(classes)}; minimized reproducers: {len(minimized)}; summary: "
      f"{os.path.join(out, 'summary.json')}")
    if not a.keep_trials:
        shutil.rmtree(os.path.join(work, "trials"), ignore_errors=True)


if __name__ == "__main__":
    main()
