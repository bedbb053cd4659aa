// NVIDIA only: tile maps for the tensor memory accelerator (tma.hpp). The driver's encoder is looked
// up through the runtime, so nothing links libcuda directly.
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/gpu/common/platform.hpp"
#include "kernels/gpu/common/tma.hpp"

namespace qattn::gpu {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 tiled_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found),
          "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (found != cudaDriverEntryPointSuccess || p == nullptr)
      throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled (a Hopper-capable driver, 12.0 or newer, is needed)");
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  });
  return fn;
}

}  // namespace

CUtensorMap make_tile_map(const void* base, int row_bytes, int rows, int planes, int box_rows, const char* what) {
  const auto fail = [&](const std::string& why) { return std::runtime_error(std::string(what) + ": tile map: " + why); };
  if (reinterpret_cast<std::uintptr_t>(base) % 16 != 0) throw fail("base address not 16-byte aligned");
  if (row_bytes <= 0 || row_bytes % kTmaBoxBytes != 0) throw fail("row of " + std::to_string(row_bytes) + " bytes, expected a positive multiple of 16");
  if (rows <= 0 || planes <= 0 || box_rows <= 0 || box_rows > 256)
    throw fail("rows " + std::to_string(rows) + ", planes " + std::to_string(planes) + ", box rows " + std::to_string(box_rows) +
               ": expected positive counts and at most 256 box rows");
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(rows), static_cast<cuuint64_t>(planes)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(row_bytes) * rows};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {kTmaBoxBytes, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = tiled_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(base), dims, strides, box, element_strides,
                                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw fail("cuTensorMapEncodeTiled refused it (CUresult " + std::to_string(static_cast<int>(r)) + ")");
  return map;
}

}  // namespace qattn::gpu
