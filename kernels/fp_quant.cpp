// Block-scaled fake quantisation onto an ExMy floating-point grid (math: icml25/ops/fp_quant.py).
//
// Per block of `block` consecutive elements of a row: s = FPmax / absmax (absmax over finite values; s = 1 for a
// block with no finite nonzero value), y = Q(x * s) / s, where Q rounds to the nearest grid value with ties to even.
// When FPmax / absmax overflows the working type (absmax below about 1e-36 in float32), the block is first brought
// up by an exact power of two 2^k = 2^a 2^b with absmax 2^k in [1, 2), and s = FPmax / (absmax 2^k):
// y = (Q(x 2^a 2^b s) / s) 2^-b 2^-a. The work is done in the input's type, float32 or float64 (a float64 input is
// rounded once, onto the grid, not first to float32). Q works on the bits, so it is exact:
//   normal range  |v| >= 2^emin : keep M mantissa bits, rounding the dropped P - M bits to nearest even (P = 23 or
//                                 52 stored mantissa bits); a carry into the exponent is the correct round-up to
//                                 the next binade;
//   subnormals    |v| <  2^emin : the grid step is 2^(emin - M), and (|v| + C) - C with C = 2^(emin - M + P)
//                                 makes the adder do the round-to-nearest-even at exactly that step;
//   then |q| > FPmax saturates to FPmax (fn, paper) or becomes Inf (ieee); NaN stays NaN; the sign is kept.
//
// Memory traffic: one read of x and one write of y. Blocks of up to kFusedBlock elements are scaled and rounded
// while they sit in the L1 cache; only a longer block (a whole long row, or the whole tensor) is read twice.
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

constexpr int64_t kFusedBlock = 1 << 12;  // 16 KiB of float32: scaled and rounded in one pass
constexpr int64_t kChunk = 1 << 14;       // elements per parallel work item of the unscaled and long-block paths

template <typename T>
struct Grid {
  using U = std::conditional_t<std::is_same_v<T, float>, uint32_t, uint64_t>;
  static constexpr int P = std::numeric_limits<T>::digits - 1;  // stored mantissa bits: 23 or 52
  static constexpr U kSign = U(1) << (8 * sizeof(T) - 1);

  T magic, fpmax;
  U min_normal, max_finite, overflow, inf, shift, half_minus_one, keep;

  Grid(int64_t man_bits, int64_t emin, double fpmax_, bool saturate)
      : magic(std::ldexp(T(1), emin - man_bits + P)),
        fpmax(static_cast<T>(fpmax_)),
        min_normal(bits(std::ldexp(T(1), emin))),
        max_finite(bits(fpmax)),
        overflow(bits(saturate ? fpmax : std::numeric_limits<T>::infinity())),
        inf(bits(std::numeric_limits<T>::infinity())),
        shift(P - man_bits),
        half_minus_one((U(1) << (P - 1 - man_bits)) - 1),
        keep(~((U(1) << (P - man_bits)) - 1)) {}

  static U bits(T v) {
    U u;
    std::memcpy(&u, &v, sizeof(T));
    return u;
  }
  static T value(U u) {
    T v;
    std::memcpy(&v, &u, sizeof(T));
    return v;
  }

  // Q(v), with every choice made on the bits of |v| (for which the integer order is the order of the values), so
  // the loops that call it vectorise: no floating-point comparison, no branch.
  inline T round(T v) const {
    const U uv = bits(v), sign = uv & kSign, ua = uv & ~kSign;
    const U sub = bits((value(ua) + magic) - magic);
    const U nor = (ua + half_minus_one + ((ua >> shift) & 1)) & keep;
    const U subnormal = U(0) - U(ua < min_normal);  // all ones or zero: a blend that makes `sub` unconditional,
    U q = nor ^ ((nor ^ sub) & subnormal);           // which a ?: would not (its add might trap)
    q = q > max_finite ? overflow : q;
    q = ua > inf ? ua : q;  // NaN stays NaN
    return value(q | sign);
  }
};

// The scale of one block: s = FPmax / absmax, and the exact powers of two pre_a, pre_b (1 unless FPmax / absmax
// overflows) with y = (Q(x pre_a pre_b s) / s) post_b post_a, post = 1 / pre.
template <typename T>
struct Scale {
  T s = 1, pre_a = 1, pre_b = 1, post_a = 1, post_b = 1;
  bool tiny() const { return pre_a != 1; }
};

template <typename T>
Scale<T> block_scale(const T* p, int64_t n, T fpmax) {
  constexpr T big = std::numeric_limits<T>::max();
  T amax = 0;
#pragma omp simd reduction(max : amax)
  for (int64_t i = 0; i < n; ++i) {
    const T a = std::fabs(p[i]);
    amax = a <= big ? std::max(amax, a) : amax;  // skips Inf and NaN
  }
  Scale<T> sc;
  if (amax == 0) return sc;  // all zero (or no finite value): s = 1
  sc.s = fpmax / amax;
  if (sc.s <= big) return sc;
  int ex;
  std::frexp(amax, &ex);  // amax = m 2^ex, m in [0.5, 1): amax 2^k lies in [1, 2) for k = 1 - ex
  const int k = 1 - ex, a = k / 2, b = k - a;
  sc.pre_a = std::ldexp(T(1), a);
  sc.pre_b = std::ldexp(T(1), b);
  sc.post_a = std::ldexp(T(1), -a);
  sc.post_b = std::ldexp(T(1), -b);
  sc.s = fpmax / (amax * sc.pre_a * sc.pre_b);
  return sc;
}

// The grid is taken by value: its fields are then locals, which the vectoriser may read unconditionally.
template <typename T>
inline void round_run(const Grid<T> grid, const T* x, T* y, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) y[j] = grid.round(x[j]);
}

template <typename T>
inline void quantize_run(const Grid<T> grid, const Scale<T> sc, const T* x, T* y, int64_t n) {
  const T s = sc.s;
  if (!sc.tiny()) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) y[j] = grid.round(x[j] * s) / s;
  } else {
    const T pa = sc.pre_a, pb = sc.pre_b, qa = sc.post_a, qb = sc.post_b;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) y[j] = grid.round(x[j] * pa * pb * s) / s * qb * qa;
  }
}

template <typename T>
void quantize(const T* xp, T* yp, int64_t rows, int64_t L, int64_t block, const Grid<T> grid) {
  const int64_t total = rows * L;
  // Threads only pay off on large tensors; on small ones (a tiny model's weights) the fork costs more.
  const bool parallel = total >= (int64_t{1} << 16);
  if (block <= 0) {  // no scaling: y = Q(x)
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t start = 0; start < total; start += kChunk) {
      round_run(grid, xp + start, yp + start, std::min(total, start + kChunk) - start);
    }
    return;
  }
  const int64_t B = std::min(block, std::max<int64_t>(L, 1));
  const int64_t nb = (L + B - 1) / B, nblocks = rows * nb;
  if (B <= kFusedBlock) {  // one pass: each block's absmax, then its rounding, while it is in L1
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < nblocks; ++i) {
      const int64_t off = (i / nb) * L + (i % nb) * B, n = std::min(B, L - (i % nb) * B);
      quantize_run(grid, block_scale(xp + off, n, grid.fpmax), xp + off, yp + off, n);
    }
    return;
  }
  // Long blocks: pass 1 finds one scale per block, pass 2 rounds in fixed-size chunks (so one big block still
  // uses every thread), walking the runs of elements that share a scale.
  std::vector<Scale<T>> scale(nblocks);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < nblocks; ++i) {
    const int64_t c = (i % nb) * B;
    scale[i] = block_scale(xp + (i / nb) * L + c, std::min(B, L - c), grid.fpmax);
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t start = 0; start < total; start += kChunk) {
    const int64_t stop = std::min(total, start + kChunk);
    for (int64_t i = start; i < stop;) {
      const int64_t r = i / L, b = (i % L) / B;
      const int64_t end = std::min(stop, r * L + std::min((b + 1) * B, L));
      quantize_run(grid, scale[r * nb + b], xp + i, yp + i, end - i);
      i = end;
    }
  }
}

}  // namespace

void fp_quantize(const at::Tensor& x, at::Tensor out, int64_t block, int64_t man_bits, int64_t emin, double fpmax,
                 bool saturate) {
  TORCH_CHECK((x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) && x.dim() == 2 &&
                  x.is_contiguous() && x.device().is_cpu(),
              "fp_quantize: a contiguous float32 or float64 CPU tensor [rows, L]");
  TORCH_CHECK(out.scalar_type() == x.scalar_type() && out.sizes() == x.sizes() && out.is_contiguous() &&
                  out.device().is_cpu(),
              "fp_quantize: out must be a contiguous CPU tensor of x's shape and dtype");
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fp_quantize", [&] {
    quantize(x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), x.size(0), x.size(1), block,
             Grid<scalar_t>(man_bits, emin, fpmax, saturate));
  });
}
