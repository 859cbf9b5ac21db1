// backends/cpu: layer_norm's f32 rows (layer_norm_rows.h) compiled with the AVX-512 flags apart
// from the rest of the library (backends/CMakeLists.txt) and called only where cpuid reports
// them: the element loops run eight doubles a step, with the bits of the narrower build.
#include "axle/backends/cpu/layer_norm_rows.h"

namespace axle::cpu {

void avx512_normalize_rows(const float* x, float* y, int64_t first, int64_t last, int64_t width,
                           double eps) {
  layer_norm_detail::normalize_rows(x, y, first, last, width, eps);
}

void avx512_normalize_rows_backward(const float* g, const float* w, const float* x, const float* r,
                                    float* dx, int64_t first, int64_t last, int64_t width,
                                    double eps, float* weighted_row) {
  layer_norm_detail::normalize_rows_backward(g, w, x, r, dx, first, last, width, eps, weighted_row);
}

}  // namespace axle::cpu
