#include "kernels/recipe/presets.hpp"

namespace qattn {

const std::vector<RecipePreset>& recipe_presets() {
  static const std::vector<RecipePreset> presets = {
      {"qflash-46adca5",
       "q=int8/tensor/scale:fp16/div:fp16 k=int8/tensor/scale:fp16/div:fp16 v=int8/tensor/scale:fp16/div:fp16 p=int8/static:127 "
       "softmax=qflash acc.qk=exact acc.pv=exact tiles=32x32 qflash.consts=kernel qflash.exp=fixed16 qflash.requant=round16 "
       "qflash.release=shift30 qflash.start=kernel qflash.tail=pad qflash.div=trunc32 out=fp16",
       "github EfficientCompLab/qflash, commit 46adca5, qflash/kernel.py (qflash_forward, unmasked kernel, default settings)",
       "fp16 inputs of one batch (its per-tensor scale is int8/tensor), not causal; the kernel's approximate fp32 division "
       "can put an output one int8 level lower"},
      {"sageattn-1.0.6",
       "q=int8/block:128/amax:mul/round:away k=int8/block:64/amax:mul/round:away ksmooth=global ksmooth.format=fp16 qprescale=1 "
       "qkscale=sequential acc.qk=exact p=fp16 v=fp16 denominator=float tiles=128x64 acc.pv=h200_wgmma_f16 pad=zero out=fp16",
       "PyPI sageattention==1.0.6 (sageattention/core.py, quant_per_block.py, attn_qk_int8_per_block.py and _causal.py), on the H200 with Triton 3.6",
       "fp16 inputs, head dims 64 and 128; not modelled: the GPU's approximate reciprocal in the quantizer and the final division, "
       "its approximate exp2, fused multiply-adds, and the row sums' tree order"},
      {"sageattn2-sm90",
       "q=int8/thread:16:8:1/div/round:away/eps:1e-07 k=int8/thread:128:8:2/div/round:away/eps:1e-07 ksmooth=global ksmooth.format=fp16 acc.qk=exact p=e4m3/static:447.8898 v=e4m3/channel denominator=float tiles=64x128 acc.pv=mma(chunk=32,align=14,chunk_bits=13,chunk_round=zero,acc_bits=23,add_round=even,flush=4,fused=1) out=fp16",
       "github thu-ml/SageAttention, commit d1a57a5, sageattention/core.py, triton/quant_per_thread.py, csrc/qattn/qk_int_sv_f8_cuda_sm90.cu, attn_utils.cuh; built and run on the H200",
       "run on the H200 (scripts/peers/prove-peers-on-h200.sh), the rule met on the shipped dump and four random inputs: a lane's Q rows 16w+g and 16w+g+8 share a scale (thread:16:8:1), its keys 8j+2t+{0,1} of a 128-key tile "
       "another (thread:128:8:2), 1e-7 added to each scale (eps), a true division; P V on the measured e4m3 wgmma, four instructions from zero per 128-key tile added into fp32 O; "
       "not modelled: the quantizer's approximate division, V's scale applied after the division, exp2's approximation"},
      {"sageattn2-sm89",
       "q=int8/thread:32:8:1/div/round:away/eps:1e-07 k=int8/thread:64:8:2/div/round:away/eps:1e-07 ksmooth=global ksmooth.format=fp16 acc.qk=exact p=e4m3/static:447.8898 v=e4m3/channel/max:2.25 denominator=float tiles=128x64 acc.pv=mma(chunk=32,align=32,chunk_bits=10,chunk_round=even,acc_bits=10,add_round=even,flush=2) out=fp16",
       "github thu-ml/SageAttention, commit d1a57a5, sageattention/core.py (sageattn_qk_int8_pv_fp8_cuda, the fp32+fp16 default), "
       "csrc/qattn/qk_int_sv_f8_cuda_sm89.cuh, attn_utils.cuh; built for sm90 and run on the H200",
       "run on the H200 (scripts/peers/prove-peers-on-h200.sh; the sm89 kernel's mma.sync code compiled for sm90): a lane's Q rows "
       "32w+g+{0,8,16,24} share a scale (thread:32:8:1), its keys 8j+2t+{0,1} of a 64-key tile another (thread:64:8:2), 1e-7 on each "
       "scale, V's absmax mapped to 2.25 (max:2.25) so that the fp16 accumulator cannot overflow; the fp16 accumulation per 64-key tile "
       "is as its documentation states it, not measured"},
      {"fa3-fp8",
       "q=e4m3/kvhead/amax:mul k=e4m3/head/amax:mul v=e4m3/head/amax:mul p=e4m3/static:256 denominator=float tiles=fa3_sm90 order=reverse acc.qk=h200_e4m3_wgmma acc.pv=h200_e4m3_wgmma out=bf16",
       "github Dao-AILab/flash-attention, commit 0251105, hopper/ (mainloop_fwd_sm90_tma_gmma_ws.hpp, softmax.h); run as PyPI fa3-fwd 0.0.3 on the H200",
       "run on the H200 (scripts/peers/prove-peers-on-h200.sh): descales absmax/448 per (batch, kv head) as the API takes them (Q's "
       "shared by a GQA group: kvhead), computed by torch on the GPU, which (inferred from the outputs) multiplies by fp32(1/448) "
       "(amax:mul: where absmax/448 is exact, the reciprocal's scale is an ulp off and breaks the ties it would make), key tiles from the last to the first (order=reverse: P is rounded against the running max), "
       "Q K^T and P V on the measured e4m3 wgmma, each summing the codes with the descales applied after (to the score, to O); "
       "not modelled: the softmax's fused multiply-adds and approximate exp2, the row sums' per-thread order; see the README's presets table"},
      {"fa3-bf16",
       "q=bf16 k=bf16 v=bf16 p=bf16 denominator=float tiles=fa3_sm90 order=reverse acc.qk=h200_wgmma_bf16 acc.pv=h200_wgmma_bf16 expform=fa exp2=sfu "
       "rowsum=lanes out=bf16",
       "github Dao-AILab/flash-attention, commit 0251105, hopper/ (softmax.h, built with fast math); run as PyPI fa3-fwd 0.0.3 on the H200",
       "run on the H200 (scripts/peers/prove-peers-on-h200.sh): bf16 Q, K, V and P, the denominator in fp32, its tiles by head dim and mask (tiles=fa3_sm90: "
       "192x128 at d 64 causal, 192x192 not causal, 128x128 / 128x176 at d 128), taken from the last to the first (order=reverse), Q K^T and P V on "
       "the measured bf16 wgmma, and the softmax's vendor math: the scale and max in one fused multiply-add (expform=fa), ex2.approx (exp2=sfu), "
       "each lane's partial row sums combined at the end (rowsum=lanes), each needed for its outputs bit for bit; not established: the final "
       "division (a division, fp32(1/l) and rcp.approx give the same outputs on the recorded rows); see the README's presets table"},
      {"pytorch-cpu-flash-bf16", "q=bf16 k=bf16 v=bf16 p=bf16 acc.qk=exact denominator=float tiles=256x512 expform=aten rowsum=vec16 norm=rcp out=bf16",
       "github pytorch/pytorch, aten/src/ATen/native/cpu/FlashAttentionKernel.cpp (cpu_flash_attention) and the AVX512 Vectorized<float>::fexp_u20; "
       "run as PyTorch 2.9.1 (PyPI torch, AVX512 build) on an x86 CPU with avx512_bf16",
       "run on the 2-core x86 machine (scripts/peers/record_pytorch_cpu_flash.py; tests/data/pytorch-2.9.1-cpu), the rule met on the shipped dump and "
       "three random inputs: bf16 Q, K, V and P, 512-key tiles, the scores times the scale in fp32 and ATen's fast exponential on each whole "
       "16-key vector, std::exp on a tile's last keys and on the rescale (expform=aten), its row sums in 16 lanes (rowsum=vec16), the "
       "denominator from fp32 P, O times fp32(1 / l) (norm=rcp); Q K^T as if summed exactly (acc.qk=exact: the nearest of the lab's orders to "
       "the bf16 GEMM's), P V in fp32; not modelled: the GEMMs' own summation orders; the AVX2 build's 8-float vectors"},
      {"pytorch-cpu-flash-fp16", "q=fp16 k=fp16 v=fp16 p=fp16 denominator=float tiles=256x512 expform=aten rowsum=vec16 norm=rcp out=fp16",
       "github pytorch/pytorch, aten/src/ATen/native/cpu/FlashAttentionKernel.cpp and the AVX512 Vectorized<float>::fexp_u20; run as PyTorch 2.9.1 (AVX512 build)",
       "as pytorch-cpu-flash-bf16 with fp16 inputs, P and output, Q K^T summed in fp32 in order (tests/data/pytorch-2.9.1-cpu); the rule met on two "
       "of five inputs, 3.6-15 dB short on the others: the fp16 GEMM's summation order of Q K^T is not modelled (moving acc.qk between the lab's "
       "two orders moves the distance by 5-13 dB, more than any other knob)"},
      {"llamacpp-q8_0",
       "q=int8/group:32/round:away k=int8/group:32/scale:fp16/codes:fp32/round:away v=int8/group:32/scale:fp16/codes:fp32/round:away "
       "acc.qk=exact p=fp32 acc.pv=fp32 tiles=1x32 split=4",
       "github ggml-org/ggml, commit d99724f (synced from llama.cpp d3cf1f1), src/ggml-cuda/fattn-common.cuh, fattn-vec.cuh, cpy-utils.cuh "
       "(the CUDA vector kernel of single-row decode, NVIDIA)",
       "single-row decode: Q times the softmax scale quantized per 32 to int8 by a division by amax/127 in fp32, rounded half away "
       "(roundf); K and V by ggml-cuda's own quantizer: codes from the fp32 scale, d stored in fp16; K Q^T from int32 sums times both "
       "scales in fp32, V dequantized to fp32, P V in fp32, keys interleaved over warps and blocks; not modelled: -use_fast_math's "
       "approximate division and expf"},
      {"llamacpp-q4_0",
       "q=int8/group:32/round:away k=int4/group:32/scale:fp16/amax:signed v=int4/group:32/scale:fp16/amax:signed acc.qk=exact "
       "kzero=qsum p=fp32 acc.pv=fp32 tiles=1x32 split=4",
       "github ggml-org/ggml, commit d99724f (synced from llama.cpp d3cf1f1), src/ggml-cuda/fattn-common.cuh, fattn-vec.cuh, cpy-utils.cuh",
       "single-row decode as llamacpp-q8_0, K and V on q4_0's grid (the element of largest magnitude at -8, the others -8..7 rounded "
       "half up, codes from the fp32 scale: amax:signed), the zero point's share -8 d_K sum(Q) from the sum of Q's unquantized values "
       "(kzero=qsum: Q in q8_1 carries it); not modelled: the partial sums per 4 elements and the warp's reduction order, "
       "-use_fast_math's approximate reciprocal and expf"},
      {"llamacpp-q8_0-cpu",
       "q=int8/group:32/scale:fp16/codes:fp32 k=int8/group:32/scale:fp16/codes:fp32 v=int8/group:32/scale:fp16/codes:fp32 acc.qk=exact p=fp32 acc.pv=fp32 tiles=1x1",
       "github ggml-org/ggml, commit d99724f, src/ggml-cpu/ops.cpp (ggml_compute_forward_flash_attn_ext_f16), arch/x86/quants.c; built here (x86, GGML_NATIVE=OFF: AVX2)",
       "run on x86 (scripts/peers/llamacpp_cpu, prove_llamacpp_cpu.py), prefill and single-row decode: Q converted to q8_0 like K, "
       "codes from the fp32 scale and d stored in fp16, V dequantized to fp32, one key at a time in fp32; not modelled: expf in place of "
       "exp2, the final multiply by 1/S, the 8-lane order of the dot products"},
      {"llamacpp-q4_0-cpu",
       "q=int8/group:32/scale:fp16/codes:fp32 k=int4/group:32/scale:fp16/amax:signed v=int4/group:32/scale:fp16/amax:signed acc.qk=exact p=fp32 acc.pv=fp32 tiles=1x1",
       "github ggml-org/ggml, commit d99724f, src/ggml-cpu/ops.cpp, ggml-quants.c (quantize_row_q4_0_ref); built here (x86, AVX2)",
       "run on x86 as llamacpp-q8_0-cpu: q4_0's grid (the element of largest magnitude at -8, the others -8..7 rounded half up, codes "
       "from the fp32 scale: amax:signed), Q in q8_0"},
      {"llamacpp-f16-cpu-decode",
       "q=fp16 k=fp16 v=fp16 p=fp32 acc.qk=fp32 acc.pv=fp16fma denominator=float tiles=1x1 split=2 split.pad=256 split.min=512",
       "github ggml-org/ggml, commit d99724f, src/ggml-cpu/ops.cpp (ggml_compute_forward_flash_attn_ext_f16_one_chunk, its split KV "
       "path and ggml_flash_attn_ext_reduce_partials), vec.h (ggml_vec_mad_f16, ggml_vec_scale_f16); built here (x86, AVX2)",
       "run on x86 with 2 threads: single-row decode over an f16 cache; Q rounded to fp16, K Q^T in fp32, each V P added into an fp16 "
       "accumulator by an fp32 fused multiply-add (fp16fma) and the accumulator rescaled in fp16, one key at a time; the cache, padded to 256 cells, "
       "cut into one chunk per thread from 512 cells (split=THREADS split.pad=256 split.min=512), chunks merged in fp32; not modelled: "
       "expf in place of exp2, the AVX2 order of the fp16 dot products"},
      {"llamacpp-f16-cpu", "q=fp32 k=fp16 v=fp16 p=fp32 acc.pv=fp32 tiles=64x64",
       "github ggml-org/ggml, commit d99724f, src/ggml-cpu/ops.cpp (the tiled path for 64 or more query rows); built here (x86, AVX2)",
       "run on x86: prefill (64 or more rows of a ubatch: fp32 Q, K and V widened to fp32, 64x64 tiles); single-row decode "
       "takes another path: llamacpp-f16-cpu-decode"},
      {"zinc",
       "q=int8/token k=int8/token ksmooth=global acc.qk=exact p=e4m3/static:448 v=e4m3/channel acc.pv=fp32",
       "the ZINC write-up's prefill recipe: int8 Q K^T with K's mean removed, e4m3 P at 448 and e4m3 V",
       "read from its description, not run: Q/K granularity and V's scale are not stated (token and channel assumed); its decode path with a running mean in the int8 K cache is left out (the lab's ksmooth=running does not reproduce its claim)"},
      {"dot4-packed16",
       "q=int8/group:32 k=int8/group:32/scale:fp16 v=fp16 acc.qk=exact p=fp32 acc.pv=fp32 tiles=8x8",
       "the DOT4 write-up's sudot4 flash attention for llama.cpp HIP on RDNA3: int8 K with fp16 scales per 32 channels",
       "read from its description, not run: Q's scale layout is ambiguous there (group:32 assumed, as the lab needs equal groups on Q and K)"},
      {"qflash-lab", "q=int8/tensor k=int8/tensor v=int8/tensor p=int8/static:127 softmax=qflash acc.qk=exact acc.pv=exact",
       "the QFlash paper's algorithm with the lab's constants (kernels/numerics/qflash.hpp)",
       "the lab's reading of the paper, before its kernel was public; the GPU family flash_integer runs it"},
  };
  return presets;
}

}  // namespace qattn
