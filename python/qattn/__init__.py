"""qattn: an accuracy laboratory for quantized flash attention.

A thin layer over the lab's C++ library (``qattn._core``): the number formats and quantizers, the
recipes, the float64 reference, the bit-faithful emulator, the GPU kernels when built with them,
the metrics and statistics, dump reading and writing, and scoring of kernels the lab did not write.
Arrays go in as NumPy arrays (or anything with DLPack on the CPU, such as torch CPU tensors) of
float16, bfloat16, float32 or float64 (only when exactly float32), [heads, tokens, dim]; they come
out as NumPy arrays that own the C++ buffers. Errors raise ValueError (DatasetError for files)
carrying the C++ message.

    >>> import qattn, numpy as np
    >>> d = qattn.load_layer("datasets/smollm2-135m-2k.h5", "15", tokens=512)
    >>> r = qattn.Recipe("q=int8/token k=int8/token p=e4m3/static:448")
    >>> ref = qattn.reference(d["q"], d["k"], d["v"], causal=True)
    >>> emu = qattn.emulate(d["q"], d["k"], d["v"], r, causal=True)
    >>> qattn.compare(ref["out"], emu["out"])["sqnr_db"]
"""
import importlib.util as _util
import os as _os
import sys as _sys

# Where torch is installed it is imported before this package's C++ library: on the H200 machine's
# Python (Ubuntu 24.04, torch 2.11) `import qattn; import torch` aborts inside torch's initialization
# ("free(): invalid pointer") while `import torch; import qattn` works (tests/python/test_import_order.py).
if _util.find_spec("torch") is not None:
    import torch  # noqa: F401

from . import _core
from ._core import (  # noqa: F401
    DatasetError,
    QuantizedTensor,
    Recipe,
    channel_outliers,
    check,
    compare,
    decode,
    dequantize,
    emulate,
    encode,
    format_info,
    formats,
    gpu_available,
    gpu_not_covered,
    gpu_run,
    load_layer,
    mass_flushed,
    mass_per_decade,
    max_threads,
    open_dump,
    p_flush_threshold,
    presets,
    quantize,
    read_outputs,
    reference,
    round_to,
    row_divergence,
    sample_rows,
    fit_files,
    score_files,
    write_dump,
    write_outputs,
)
from ._fit import fit  # noqa: F401
from ._score import score  # noqa: F401

__version__ = _core.__version__

# An installed package (pip) carries the figure scripts and draws with the interpreter importing it;
# the build tree's package uses the build's (its .venv and reports/).
_figures = _os.path.join(_os.path.dirname(__file__), "_figures")
if _os.path.isdir(_figures):
    _core._set_figure_tools(_sys.executable, _figures)

__all__ = [
    "DatasetError", "QuantizedTensor", "Recipe", "channel_outliers", "check", "compare", "decode", "dequantize", "emulate",
    "encode", "fit", "fit_files", "format_info", "formats", "gpu_available", "gpu_not_covered", "gpu_run", "load_layer", "mass_flushed",
    "mass_per_decade", "max_threads", "open_dump", "p_flush_threshold", "presets", "quantize", "read_outputs", "reference", "round_to",
    "row_divergence", "sample_rows", "score", "score_files", "write_dump", "write_outputs",
]
