// Block-scaled fake quantisation onto an ExMy floating-point grid (math: icml25/ops/fp_quant.py).
//
// Per block of `block` consecutive elements of a row: s = FPmax / absmax (absmax over finite values; s = 1 when
// that is not a finite number), y = Q(x * s) / s, where Q rounds to the nearest grid value with ties to even.
// Q works on the float32 bits, so it is exact:
//   normal range  |v| >= 2^emin : keep M mantissa bits, rounding the dropped 23 - M bits to nearest even;
//                                 a carry into the exponent is the correct round-up to the next binade;
//   subnormals    |v| <  2^emin : the grid step is 2^(emin - M), and (|v| + C) - C with C = 2^(emin - M + 23)
//                                 makes the float32 adder do the round-to-nearest-even at exactly that step;
//   then |q| > FPmax saturates to FPmax (fn, paper) or becomes Inf (ieee); NaN stays NaN; the sign is kept.
#include "kernels.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

struct Grid {
  float min_normal, magic, fpmax, overflow;
  uint32_t shift, half_minus_one, keep;

  Grid(int64_t man_bits, int64_t emin, double fpmax_, bool saturate)
      : min_normal(std::ldexp(1.0f, emin)),
        magic(std::ldexp(1.0f, emin - man_bits + 23)),
        fpmax(static_cast<float>(fpmax_)),
        overflow(saturate ? static_cast<float>(fpmax_) : INFINITY),
        shift(23 - man_bits),
        half_minus_one((1u << (22 - man_bits)) - 1u),
        keep(~((1u << (23 - man_bits)) - 1u)) {}

  // Q(v): branch-free, so the compiler vectorises the loop that calls it.
  inline float round(float v) const {
    const float a = std::fabs(v);
    const float sub = (a + magic) - magic;
    uint32_t u;
    std::memcpy(&u, &a, 4);
    u = (u + half_minus_one + ((u >> shift) & 1u)) & keep;
    float nor;
    std::memcpy(&nor, &u, 4);
    float q = a < min_normal ? sub : nor;
    q = q > fpmax ? overflow : q;
    q = std::copysign(q, v);
    return v != v ? v : q;
  }
};

// The scale of one block: FPmax / absmax over its finite elements, or 1 when that is not finite (an all-zero block).
float block_scale(const float* p, int64_t n, float fpmax) {
  float amax = 0.0f;
#pragma omp simd reduction(max : amax)
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(p[i]);
    amax = a <= FLT_MAX ? std::max(amax, a) : amax;  // skips Inf and NaN
  }
  const float s = fpmax / amax;
  return s <= FLT_MAX ? s : 1.0f;
}

}  // namespace

at::Tensor fp_quantize(const at::Tensor& x, int64_t block, int64_t man_bits, int64_t emin, double fpmax,
                       bool saturate) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() == 2 && x.is_contiguous(), "fp_quantize: contiguous float32 [rows, L]");
  const Grid grid(man_bits, emin, fpmax, saturate);
  const int64_t rows = x.size(0), L = x.size(1);
  const int64_t B = block > 0 ? std::min(block, std::max<int64_t>(L, 1)) : std::max<int64_t>(L, 1);
  const int64_t nb = (L + B - 1) / B, nblocks = rows * nb;
  auto y = at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();

  // Threads only pay off on large tensors; on small ones (a tiny model's weights) the fork costs more.
  const bool parallel = rows * L >= (int64_t{1} << 16);
  // Pass 1: one scale per block.
  std::vector<float> scale(nblocks, 1.0f);
  if (block > 0) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < nblocks; ++i) {
      const int64_t r = i / nb, c = (i % nb) * B;
      scale[i] = block_scale(xp + r * L + c, std::min(B, L - c), grid.fpmax);
    }
  }
  // Pass 2: quantise in fixed-size chunks (so one big block still uses every thread), walking the runs of
  // elements that share a scale.
  const int64_t total = rows * L, chunk = 1 << 14;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t start = 0; start < total; start += chunk) {
    const int64_t stop = std::min(total, start + chunk);
    for (int64_t i = start; i < stop;) {
      const int64_t r = i / L, b = (i % L) / B;
      const int64_t end = std::min(stop, r * L + std::min((b + 1) * B, L));
      const float s = scale[r * nb + b];
#pragma omp simd
      for (int64_t j = i; j < end; ++j) yp[j] = grid.round(xp[j] * s) / s;
      i = end;
    }
  }
  return y;
}
