#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention in bf16 (flash and cuDNN backends), SageAttention 1.0.6
(int8 QK^T + fp16 PV, Triton; fp16 inputs) and FlashAttention-3's forward (PyPI fa3-fwd 0.0.3, its
hopper/ kernels: fp8 e4m3 with descales of ones, and bf16) on the shapes of `qattn bench gpu` (B=1,
H=32, d=128 and 64, N=4096 and 16384, causal and not); writes JSON that `qattn bench gpu --sdpa
FILE` reads.

    python3 scripts/bench_sdpa.py --out LOGS/sdpa.json [--reps 50] [--tokens 4096,16384] [--backends fa3_fp8,fa3_bf16]
    python3 scripts/bench_sdpa.py --dry-run          # no GPU: lists the rows, checks the API on CPU

Inputs: torch.randn in bf16, several input sets in turn so that L2 does not hold one set between
launches. Timing: CUDA events around each launch, after warm-up; the median is reported.
FLOPs: 4*N^2*d*B*H (QK^T and PV, 2 per multiply-add), halved when causal.
A backend that cannot run a shape is recorded with ms/tflops null and the reason; the run goes on.
Needs torch; SageAttention when `import sageattention` works and FlashAttention-3 when `import
fa3_fwd_interface` does (scripts/gpu-machine.sh installs the wheels that scripts/fetch-peers.sh
downloads), else their rows say they are not installed. SageAttention subtracts K's mean in place:
each launch gets its own copy of K, made before the timed region. FlashAttention-3 takes [B, N, H,
d]: the inputs are transposed (and cast to e4m3 for fp8) once, before timing.
"""
import argparse
import json
import os
import statistics
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
PEERS = ("sage1", "fa3_fp8", "fa3_bf16")  # SageAttention 1.0.6's sageattn; FlashAttention-3's flash_attn_func


def _version(package):
    from importlib import metadata
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def sage1():
    """sageattn, or the reason it cannot run."""
    try:
        from sageattention import sageattn
    except ImportError as e:
        return None, f"sageattention not installed ({e}); scripts/fetch-peers.sh downloads the wheel"
    return sageattn, None


def fa3():
    """FlashAttention-3's flash_attn_func, or the reason it cannot run."""
    try:
        from fa3_fwd_interface import flash_attn_func
    except ImportError as e:
        return None, f"fa3_fwd_interface not importable ({e}); scripts/fetch-peers.sh downloads the fa3-fwd wheel"
    return flash_attn_func, None


def flops(b, h, n, d, causal):
    f = 4.0 * n * n * d * b * h
    return f / 2 if causal else f


def make_sets(b, h, n, d, sets, device, gen):
    shape = (b, h, n, d)
    return [tuple(torch.randn(shape, dtype=torch.bfloat16, device=device, generator=gen) for _ in range(3))
            for _ in range(sets)]


def median_ms(call, sets, warmup, reps):
    """Median milliseconds of `reps` launches (CUDA events around each), after `warmup` launches;
    call(q, k, v) returns the launch as a function of no arguments, so that what it prepares (a
    copy of an input) stays outside the timed region."""
    for i in range(warmup):
        call(*sets[i % len(sets)])()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (start, stop) in enumerate(events):
        launch = call(*sets[i % len(sets)])
        start.record()
        launch()
        stop.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(t) for s, t in events)


def run_peer(inputs, causal, warmup, reps):
    """SageAttention 1's median milliseconds, as run_backend; inputs are cast to fp16 (its kernels'
    operand type), K copied per launch outside the timed region (sageattn smooths K in place)."""
    fn, reason = sage1()
    if fn is None:
        return None, reason
    sets = [tuple(t.to(torch.float16) for t in s) for s in inputs]

    def call(q, k, v):
        kc = k.clone()
        return lambda: fn(q, kc, v, tensor_layout="HND", is_causal=causal)

    try:
        return median_ms(call, sets, warmup, reps), None
    except (RuntimeError, AssertionError, ValueError) as e:
        return None, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def run_fa3(inputs, causal, fp8, warmup, reps):
    """FlashAttention-3's median milliseconds, as run_backend: bf16, or e4m3 codes with descales of
    ones ([B, H] each, fp32), inputs made [B, N, H, d] before the timed region."""
    fn, reason = fa3()
    if fn is None:
        return None, reason
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    sets = [tuple(t.transpose(1, 2).contiguous().to(dtype) for t in s) for s in inputs]
    kw = {"causal": causal}
    if fp8:
        b, h = inputs[0][0].shape[:2]
        ones = torch.ones((b, h), dtype=torch.float32, device=inputs[0][0].device)
        kw.update(q_descale=ones, k_descale=ones, v_descale=ones)
    try:
        return median_ms(lambda q, k, v: lambda: fn(q, k, v, **kw), sets, warmup, reps), None
    except (RuntimeError, AssertionError, ValueError, TypeError) as e:
        return None, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def run_backend(backend, inputs, causal, warmup, reps):
    """SDPA's median milliseconds on one backend (median_ms), or None and the reason it cannot run."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(BACKENDS[backend]):
                return median_ms(lambda q, k, v: lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                 inputs, warmup, reps), None
        except RuntimeError as e:
            reasons = [str(w.message) for w in caught]
            return None, " | ".join([str(e).strip().splitlines()[0]] + reasons)


def dry_run(args, shapes, backends):
    found = {"sage1": sage1()[1] or "importable", "fa3": fa3()[1] or "importable"}
    print(f"dry run: torch {torch.__version__}, backends {backends} "
          f"({found}), {len(shapes) * len(backends)} rows planned:")
    for b, h, n, d, causal in shapes:
        for backend in backends:
            print(f"  B={b} H={h} N={n} d={d} causal={causal} backend={backend}  {flops(b, h, n, d, causal) / 1e12:.3f} TFLOP")
    # The API on CPU, small shape: input sets, the math backend under sdpa_kernel, is_causal.
    gen = torch.Generator(device="cpu").manual_seed(0)
    sets = make_sets(1, 2, 128, 128, args.sets, "cpu", gen)
    with sdpa_kernel(SDPBackend.MATH):
        for causal in (False, True):
            q, k, v = sets[0]
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            assert out.shape == q.shape and out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()
    print(f"dry run: {args.sets} input sets of bf16 randn built on CPU; math-backend SDPA ran (causal and not)")
    return 0


def positive_int(text):
    """argparse type: an integer >= 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v}; expected an integer >= 1")
    return v


def positive_ints(text):
    """argparse type: comma-separated integers >= 1, at least one."""
    values = [positive_int(t.strip()) for t in text.split(",") if t.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r}: expected one or more integers >= 1, comma separated")
    return values


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="JSON file to write (atomically)")
    ap.add_argument("--tokens", type=positive_ints, default="4096,16384", help="context lengths N, comma separated")
    ap.add_argument("--batch", type=positive_int, default=1)
    ap.add_argument("--heads", type=positive_int, default=32)
    ap.add_argument("--head-dims", type=positive_ints, default="128,64", help="head dimensions d, comma separated")
    ap.add_argument("--reps", type=positive_int, default=50, help="timed launches per row; the median is reported")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--sets", type=positive_int, default=4, help="input sets used in turn (L2 does not hold one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backends", default=",".join((*BACKENDS, *PEERS)),
                    help="backends to run, comma separated (default: all of " + ", ".join((*BACKENDS, *PEERS)) + ")")
    ap.add_argument("--dry-run", action="store_true", help="no GPU needed: list the rows, check the API on CPU")
    args = ap.parse_args()
    if args.reps < 1 or args.warmup < 0 or args.sets < 1:
        ap.error("--reps >= 1, --warmup >= 0, --sets >= 1")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in (*BACKENDS, *PEERS)]
    if unknown or not backends:
        ap.error(f"--backends: unknown {unknown or 'empty list'}; expected some of {', '.join((*BACKENDS, *PEERS))}")
    tokens, dims = args.tokens, args.head_dims
    shapes = [(args.batch, args.heads, n, d, causal) for d in dims for n in tokens for causal in (False, True)]
    if args.dry_run:
        return dry_run(args, shapes, backends)
    if not args.out:
        ap.error("--out FILE is required (unless --dry-run)")
    if not torch.cuda.is_available():
        print("bench_sdpa: error: torch sees no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 1

    device = torch.cuda.get_device_name(0)
    print(f"bench_sdpa: {device}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuDNN {torch.backends.cudnn.version()}; median of {args.reps} launches, {args.sets} input sets")
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    rows = []
    for b, h, n, d, causal in shapes:
        inputs = make_sets(b, h, n, d, args.sets, "cuda", gen)
        for backend in backends:
            if backend in BACKENDS:
                ms, reason = run_backend(backend, inputs, causal, args.warmup, args.reps)
            elif backend == "sage1":
                ms, reason = run_peer(inputs, causal, args.warmup, args.reps)
            else:
                ms, reason = run_fa3(inputs, causal, backend == "fa3_fp8", args.warmup, args.reps)
            tflops = None if ms is None else flops(b, h, n, d, causal) / (ms * 1e-3) / 1e12
            rows.append({"B": b, "H": h, "N": n, "d": d, "causal": causal, "backend": backend,
                         "ms": ms, "tflops": tflops, "error": reason})
            shape = f"B={b} H={h} N={n:<6} d={d} causal={int(causal)} {backend:<8}"
            if ms is None:
                print(f"  {shape}  unavailable: {reason}")
            else:
                print(f"  {shape}  {ms:9.3f} ms  {tflops:7.1f} TFLOP/s")
        del inputs
        torch.cuda.empty_cache()

    doc = {"device": device, "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
           "cudnn_version": torch.backends.cudnn.version(),
           "dtype": "bfloat16 (SDPA, fa3_bf16), float16 (sage1), float8_e4m3fn with descales of ones (fa3_fp8)",
           "sage1_version": _version("sageattention"), "fa3_version": _version("fa3-fwd"),
           "flops": "4*N^2*d*B*H, halved when causal", "reps": args.reps, "warmup": args.warmup,
           "input_sets": args.sets, "rows": rows}
    tmp = f"{args.out}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.out)
    print(f"bench_sdpa: wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
