// The weighted-sum embedding bag of a product-key memory layer (math: icml25/ops/embedding_bag.py).
//
// forward   out[b]     = sum_k w[b,k] * V[idx[b,k]]                  one thread per bag, SIMD over D
// backward  dV[n]      = sum_{(b,k): idx[b,k] = n} w[b,k] * dout[b]   counting sort of the B*K slots by row, then
//                                                                     each row is summed by one thread: no atomics
//           dw[b,k]    = <dout[b], V[idx[b,k]]>                       one dot product per slot
#include "kernels.h"

#include <vector>

namespace {

template <typename scalar_t>
void forward(const scalar_t* V, const int64_t* idx, const scalar_t* w, scalar_t* out, int64_t B, int64_t K,
             int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    scalar_t* ob = out + b * D;
    for (int64_t d = 0; d < D; ++d) ob[d] = 0;
    for (int64_t k = 0; k < K; ++k) {
      const scalar_t wk = w[b * K + k];
      const scalar_t* row = V + idx[b * K + k] * D;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) ob[d] += wk * row[d];
    }
  }
}

// Row n of dV is owned by one thread, which sums its slots order[offset[n] .. offset[n+1]).
template <typename scalar_t>
void backward(const scalar_t* V, const int64_t* idx, const scalar_t* w, const scalar_t* g, const int64_t* offset,
              const int64_t* order, scalar_t* gV, scalar_t* gw, int64_t N, int64_t S, int64_t K, int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    scalar_t* row = gV + n * D;
    for (int64_t d = 0; d < D; ++d) row[d] = 0;
    for (int64_t i = offset[n]; i < offset[n + 1]; ++i) {
      const int64_t s = order[i];
      const scalar_t ws = w[s];
      const scalar_t* gb = g + (s / K) * D;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) row[d] += ws * gb[d];
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < S; ++s) {
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
                                               const at::Tensor& indices, const at::Tensor& weights) {
  const int64_t N = values.size(0), D = values.size(1), S = indices.numel(), K = indices.size(1);
  const int64_t* idx = indices.data_ptr<int64_t>();

  // Counting sort of the slots by row: the slots of row n are order[offset[n] .. offset[n+1]).
  std::vector<int64_t> offset(N + 1, 0), order(S);
  for (int64_t s = 0; s < S; ++s) ++offset[idx[s] + 1];
  for (int64_t n = 0; n < N; ++n) offset[n + 1] += offset[n];
  std::vector<int64_t> fill(offset.begin(), offset.end() - 1);
  for (int64_t s = 0; s < S; ++s) order[fill[idx[s]]++] = s;

  auto grad_values = at::empty_like(values);
  auto grad_weights = at::empty_like(weights);
  AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "embedding_bag_backward", [&] {
    backward(values.data_ptr<scalar_t>(), idx, weights.data_ptr<scalar_t>(), grad_out.data_ptr<scalar_t>(),
             offset.data(), order.data(), grad_values.data_ptr<scalar_t>(), grad_weights.data_ptr<scalar_t>(), N, S,
             K, D);
  });
  return {grad_values, grad_weights};
}
