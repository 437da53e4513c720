// The weighted-sum embedding bag of a product-key memory layer (math: icml25/ops/embedding_bag.py).
//
// forward   out[b]     = sum_k w[b,k] * V[idx[b,k]]                  one thread per bag, SIMD over D, the sums in
//                                                                     registers; the rows of the slots kPrefetch
//                                                                     ahead are prefetched, so the random reads of
//                                                                     V overlap
// backward  dV[n]      = sum_{(b,k): idx[b,k] = n} w[b,k] * dout[b]   a radix sort of the B*K slots by row, then
//                                                                     each touched row is summed by one thread: no
//                                                                     atomics; dV is dense [N, D] or only the
//                                                                     touched rows (a sparse gradient)
//           dw[b,k]    = <dout[b], V[idx[b,k]]>                       one dot product per slot
#include "kernels.h"

#include <numeric>
#include <utility>
#include <vector>

namespace {

constexpr int64_t kPrefetch = 16;  // slots ahead whose rows are prefetched
constexpr int kDigit = 11;         // radix-sort digit: 2048 buckets

template <typename scalar_t>
inline void prefetch_row(const scalar_t* row, int64_t D) {
  for (int64_t off = 0; off < D * int64_t(sizeof(scalar_t)); off += 64)
    __builtin_prefetch(reinterpret_cast<const char*>(row) + off);
}

// One bag's output in tiles of kTile values held in registers across its K slots (the tail tile in memory).
template <typename scalar_t>
void forward(const scalar_t* V, const int64_t* idx, const scalar_t* w, scalar_t* out, int64_t B, int64_t K,
             int64_t D) {
  constexpr int64_t kTile = 64 / sizeof(scalar_t) * 4;  // four cache lines of the row
  const int64_t S = B * K;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    scalar_t* ob = out + b * D;
    int64_t d0 = 0;
    for (; d0 + kTile <= D; d0 += kTile) {
      scalar_t acc[kTile] = {};
      for (int64_t s = b * K; s < (b + 1) * K; ++s) {
        if (d0 == 0 && s + kPrefetch < S) prefetch_row(V + idx[s + kPrefetch] * D, D);
        const scalar_t ws = w[s];
        const scalar_t* row = V + idx[s] * D + d0;
#pragma omp simd
        for (int64_t d = 0; d < kTile; ++d) acc[d] += ws * row[d];
      }
      for (int64_t d = 0; d < kTile; ++d) ob[d0 + d] = acc[d];
    }
    if (d0 == D) continue;
    for (int64_t d = d0; d < D; ++d) ob[d] = 0;
    for (int64_t s = b * K; s < (b + 1) * K; ++s) {
      if (d0 == 0 && s + kPrefetch < S) prefetch_row(V + idx[s + kPrefetch] * D, D);
      const scalar_t ws = w[s];
      const scalar_t* row = V + idx[s] * D;
#pragma omp simd
      for (int64_t d = d0; d < D; ++d) ob[d] += ws * row[d];
    }
  }
}

// The slots sorted by row (a stable LSD radix sort, kDigit bits a pass) and the start of each row's run:
// the slots of the r-th touched row are order[start[r] .. start[r+1]).
struct Runs {
  std::vector<int64_t> order, start;
};

Runs sort_by_row(const int64_t* idx, int64_t S, int64_t N) {
  Runs runs{std::vector<int64_t>(S), {}};
  std::vector<int64_t>& order = runs.order;
  std::iota(order.begin(), order.end(), 0);
  std::vector<int64_t> tmp(S), count((1 << kDigit) + 1);
  for (int shift = 0; shift < 63 && (N - 1) >> shift; shift += kDigit) {
    std::fill(count.begin(), count.end(), 0);
    for (int64_t i = 0; i < S; ++i) ++count[((idx[order[i]] >> shift) & ((1 << kDigit) - 1)) + 1];
    std::partial_sum(count.begin(), count.end(), count.begin());
    for (int64_t i = 0; i < S; ++i) tmp[count[(idx[order[i]] >> shift) & ((1 << kDigit) - 1)]++] = order[i];
    std::swap(order, tmp);
  }
  for (int64_t i = 0; i < S; ++i)
    if (i == 0 || idx[order[i]] != idx[order[i - 1]]) runs.start.push_back(i);
  runs.start.push_back(S);
  return runs;
}

// grad[r] = sum over the r-th run's slots s of w[s] * g[s / K]; row r of `grad` is row dst(r) of the output.
template <typename scalar_t, typename Dst>
void sum_runs(const Runs& runs, const scalar_t* w, const scalar_t* g, scalar_t* grad, int64_t K, int64_t D, Dst dst) {
  const int64_t U = int64_t(runs.start.size()) - 1;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < U; ++r) {
    scalar_t* row = grad + dst(r) * D;
    for (int64_t d = 0; d < D; ++d) row[d] = 0;
    for (int64_t i = runs.start[r]; i < runs.start[r + 1]; ++i) {
      const int64_t s = runs.order[i];
      const scalar_t ws = w[s];
      const scalar_t* gb = g + (s / K) * D;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) row[d] += ws * gb[d];
    }
  }
}

template <typename scalar_t>
void weight_grads(const scalar_t* V, const int64_t* idx, const scalar_t* g, scalar_t* gw, int64_t S, int64_t K,
                  int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < S; ++s) {
    if (s + kPrefetch < S) prefetch_row(V + idx[s + kPrefetch] * D, D);
    const scalar_t* gb = g + (s / K) * D;
    const scalar_t* row = V + idx[s] * D;
    scalar_t acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t d = 0; d < D; ++d) acc += gb[d] * row[d];
    gw[s] = acc;
  }
}

}  // namespace

at::Tensor embedding_bag_forward(const at::Tensor& values, const at::Tensor& indices, const at::Tensor& weights) {
  const int64_t B = indices.size(0), K = indices.size(1), D = values.size(1);
  auto out = at::empty({B, D}, values.options());
  AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "embedding_bag_forward", [&] {
    forward(values.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(), weights.data_ptr<scalar_t>(),
            out.data_ptr<scalar_t>(), B, K, D);
  });
  return out;
}

std::vector<at::Tensor> embedding_bag_backward(const at::Tensor& grad_out, const at::Tensor& values,
                                               const at::Tensor& indices, const at::Tensor& weights, bool sparse) {
  const int64_t N = values.size(0), D = values.size(1), S = indices.numel(), K = indices.size(1);
  const int64_t* idx = indices.data_ptr<int64_t>();
  const Runs runs = sort_by_row(idx, S, N);
  const int64_t U = int64_t(runs.start.size()) - 1;

  at::Tensor rows = at::empty({U}, indices.options());
  int64_t* rp = rows.data_ptr<int64_t>();
  for (int64_t r = 0; r < U; ++r) rp[r] = idx[runs.order[runs.start[r]]];
  auto grad_values = sparse ? at::empty({U, D}, values.options()) : at::zeros_like(values);
  auto grad_weights = at::empty_like(weights);
  AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "embedding_bag_backward", [&] {
    const scalar_t* w = weights.data_ptr<scalar_t>();
    const scalar_t* g = grad_out.data_ptr<scalar_t>();
    scalar_t* gv = grad_values.data_ptr<scalar_t>();
    if (sparse)
      sum_runs(runs, w, g, gv, K, D, [](int64_t r) { return r; });
    else
      sum_runs(runs, w, g, gv, K, D, [rp](int64_t r) { return rp[r]; });
    weight_grads(values.data_ptr<scalar_t>(), idx, g, grad_weights.data_ptr<scalar_t>(), S, K, D);
  });
  return {grad_values, grad_weights, rows};
}
