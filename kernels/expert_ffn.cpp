// Top-k dispatch of a mixture of SwiGLU experts (math and signature: icml25/ops/expert_ffn.py).
//
// The T*k routing slots (slot = t*k + j goes to expert index[t,j] with weight weight[t,j]) are counting-sorted by
// expert, so expert e owns the contiguous rows offset[e] .. offset[e+1] of the gathered inputs; each expert then
// runs as three GEMMs on its group:
//     A = G W_gate[e],  U = X W_up[e],  H = silu(A) * U,  O = H W_out[e]
// where G is the gate input (x itself, or the per-expert features gate[t, e]). The weighted scatter-add back,
// y[t] = sum_j weight[t,j] * O[pos[t*k+j]], is a gather per token, so neither direction needs atomics.
//
// SwiGLU and its derivative are one vectorised pass each (ATen's Vectorized), in place of ATen's separate silu,
// mul and silu_backward ops with their temporaries: 5-10% of a forward and backward step at d = 64 and 128, about
// 4% at d = 256 (interleaved against the separate ops). The sigmoid's exp is ATen's exp_u20 (at most 20 ulp, as
// ATen's own softmax uses), which took about 4% off a step at d = 256 against the full-precision exp.
//
// The backward keeps A and U from the forward and recomputes H = silu(A) * U in the pass that differentiates it
// (the same operations in the same order, so the same bits), and every buffer used within one expert group only
// (H in the forward; dO, dA, dU and H in the backward) is that group's own [n, *] scratch: the layer saves two
// [T k, h] activations instead of three, and a step no longer allocates four more [T k, *] buffers, whose pages
// the allocator may hand back to the system between steps and fault in again.
#if defined(__AVX2__) && defined(__FMA__)  // the 256-bit Vectorized, as ATen's own AVX2 kernels are compiled
#define CPU_CAPABILITY AVX2
#define CPU_CAPABILITY_AVX2
#endif
#include "kernels.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace {

struct Groups {
  at::Tensor slot_of;  // [S] the slot at each sorted position
  at::Tensor pos_of;   // [S] the sorted position of each slot
  at::Tensor offset;   // [E + 1]
};

Groups sort_by_expert(const at::Tensor& index, int64_t E) {
  const int64_t S = index.numel();
  const int64_t* e = index.data_ptr<int64_t>();
  auto opts = index.options();
  Groups g{at::empty({S}, opts), at::empty({S}, opts), at::zeros({E + 1}, opts)};
  int64_t *slot = g.slot_of.data_ptr<int64_t>(), *pos = g.pos_of.data_ptr<int64_t>(), *off = g.offset.data_ptr<int64_t>();
  for (int64_t s = 0; s < S; ++s) ++off[e[s] + 1];
  for (int64_t i = 0; i < E; ++i) off[i + 1] += off[i];
  std::vector<int64_t> fill(off, off + E);
  for (int64_t s = 0; s < S; ++s) {
    pos[s] = fill[e[s]]++;
    slot[pos[s]] = s;
  }
  return g;
}

// out = a @ b, written into `out` (a view of a larger buffer)
void mm_into(at::Tensor out, const at::Tensor& a, const at::Tensor& b) { at::mm_out(out, a, b); }

// f(e, first row, rows) for every expert e with tokens. With at least two groups per thread the groups are split
// among the threads (at::parallel_for, with the caller's grad mode carried into each) and each group's GEMMs run
// on one thread, so each thread streams through its own experts' weights and activations instead of every thread
// taking a slice of every small GEMM; with fewer groups they run one after another, each GEMM on every thread.
template <typename F>
void for_each_group(const at::Tensor& offset, F f) {
  const int64_t* off = offset.data_ptr<int64_t>();
  std::vector<int64_t> experts;
  for (int64_t e = 0; e + 1 < offset.numel(); ++e)
    if (off[e + 1] > off[e]) experts.push_back(e);
  const int64_t G = int64_t(experts.size());
  const at::ThreadLocalState caller;  // grad mode off, as in the autograd.Function that called us
  auto run = [&](int64_t begin, int64_t end) {
    at::ThreadLocalStateGuard guard(caller);
    for (int64_t i = begin; i < end; ++i) f(experts[i], off[experts[i]], off[experts[i] + 1] - off[experts[i]]);
  };
  if (G >= 2 * at::get_num_threads())
    at::parallel_for(0, G, 1, run);
  else
    run(0, G);
}

// dst[p] = src[row(p)] for every sorted position p, rows of length n.
template <typename scalar_t, typename Row>
void gather_rows(scalar_t* dst, const scalar_t* src, int64_t S, int64_t n, Row row) {
#pragma omp parallel for schedule(static) if (S * n >= kParallelValues)
  for (int64_t p = 0; p < S; ++p) std::memcpy(dst + p * n, src + row(p) * n, n * sizeof(scalar_t));
}

// y[t] = sum_j w[t,j] * O[pos[t*k+j]]: the weighted scatter-add back, as one gather per token.
template <typename scalar_t>
void combine(const scalar_t* O, const scalar_t* w, const int64_t* pos, scalar_t* y, int64_t T, int64_t k, int64_t d) {
#pragma omp parallel for schedule(static) if (T * k * d >= kParallelValues)
  for (int64_t t = 0; t < T; ++t) {
    scalar_t* yt = y + t * d;
    for (int64_t c = 0; c < d; ++c) yt[c] = 0;
    for (int64_t j = 0; j < k; ++j) {
      const scalar_t wj = w ? w[t * k + j] : scalar_t(1);
      const scalar_t* ot = O + pos[t * k + j] * d;
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) yt[c] += wj * ot[c];
    }
  }
}

// dO[p] = w[s] * dy[t],  dw[s] = <dy[t], O[p]>  for the slot s = slot[p] of token t = s / k
// for the sorted positions o .. o+n-1 of one expert group, dO holding that group's n rows
template <typename scalar_t>
void output_grads(const scalar_t* gy, const scalar_t* w, const scalar_t* O, const int64_t* slot, scalar_t* dO,
                  scalar_t* gw, int64_t o, int64_t n, int64_t k, int64_t d) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = o + i, s = slot[p];
    const scalar_t* g = gy + (s / k) * d;
    scalar_t acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t c = 0; c < d; ++c) {
      dO[i * d + c] = w[s] * g[c];
      acc += g[c] * O[p * d + c];
    }
    gw[s] = acc;
  }
}

// grad_gate[t, e] += dG[pos[t*k+j]] for e = index[t, j]; one thread per token, so repeats need no atomics.
template <typename scalar_t>
void scatter_gate_grad(const scalar_t* dG, const int64_t* pos, const int64_t* index, scalar_t* gg, int64_t T,
                       int64_t k, int64_t E, int64_t dg) {
#pragma omp parallel for schedule(static) if (T * k * dg >= kParallelValues)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      scalar_t* ggt = gg + (t * E + index[t * k + j]) * dg;
      const scalar_t* src = dG + pos[t * k + j] * dg;
#pragma omp simd
      for (int64_t c = 0; c < dg; ++c) ggt[c] += src[c];
    }
}

// h = silu(a) * u = a s u, s = sigmoid(a) = 1 / (1 + exp(-a)), over n values.
template <typename scalar_t>
void swiglu(const scalar_t* a, const scalar_t* u, scalar_t* h, int64_t n) {
  using Vec = at::vec::Vectorized<scalar_t>;
  const Vec one(1);
  for (int64_t i = 0; i < n; i += Vec::size()) {
    const int64_t m = std::min<int64_t>(Vec::size(), n - i);
    const Vec va = Vec::loadu(a + i, m);
    const Vec s = one / (one + va.neg().exp_u20());
    (va * s * Vec::loadu(u + i, m)).store(h + i, m);
  }
}

// The derivative of h = silu(a) * u: du = dh silu(a), da = dh u silu'(a) with silu'(a) = s (1 + a (1 - s)),
// s = sigmoid(a). `da` holds dh on entry (it is overwritten in place), so dh needs no buffer of its own; h itself
// is recomputed into `h` on the way, so the forward need not keep it.
template <typename scalar_t>
void swiglu_backward(const scalar_t* a, const scalar_t* u, scalar_t* da, scalar_t* du, scalar_t* h, int64_t n) {
  using Vec = at::vec::Vectorized<scalar_t>;
  const Vec one(1);
  for (int64_t i = 0; i < n; i += Vec::size()) {
    const int64_t m = std::min<int64_t>(Vec::size(), n - i);
    const Vec va = Vec::loadu(a + i, m), vu = Vec::loadu(u + i, m), dh = Vec::loadu(da + i, m);
    const Vec s = one / (one + va.neg().exp_u20()), silu = va * s;
    (silu * vu).store(h + i, m);  // h exactly as the forward computed it
    (dh * silu).store(du + i, m);
    (dh * vu * s * (one + va * (one - s))).store(da + i, m);
  }
}

}  // namespace

std::vector<at::Tensor> expert_ffn_forward(const at::Tensor& x, const at::Tensor& index, const at::Tensor& weight,
                                           const at::Tensor& gate, const at::Tensor& w_gate,
                                           const at::Tensor& w_up, const at::Tensor& w_out) {
  const int64_t T = x.size(0), d = x.size(1), k = index.size(1), S = T * k;
  const int64_t E = w_up.size(0), h = w_up.size(2), dg = w_gate.size(1);
  const bool per_expert = gate.dim() == 3;
  Groups g = sort_by_expert(index, E);
  const int64_t* slot = g.slot_of.data_ptr<int64_t>();
  const int64_t* eidx = index.data_ptr<int64_t>();

  auto Xs = at::empty({S, d}, x.options());
  auto Gs = per_expert ? at::empty({S, dg}, x.options()) : Xs;
  auto A = at::empty({S, h}, x.options()), U = at::empty_like(A);
  auto O = at::empty({S, d}, x.options());
  auto y = at::empty({T, d}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "expert_ffn_forward", [&] {
    gather_rows(Xs.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), S, d, [&](int64_t p) { return slot[p] / k; });
    if (per_expert)  // gate[t, e] is row t*E + e of gate viewed as [T*E, dg]
      gather_rows(Gs.data_ptr<scalar_t>(), gate.data_ptr<scalar_t>(), S, dg,
                  [&](int64_t p) { return (slot[p] / k) * E + eidx[slot[p]]; });
    for_each_group(g.offset, [&](int64_t e, int64_t o, int64_t n) {
      at::Tensor a = A.narrow(0, o, n), u = U.narrow(0, o, n), hh = at::empty({n, h}, x.options());
      mm_into(a, Gs.narrow(0, o, n), w_gate[e]);
      mm_into(u, Xs.narrow(0, o, n), w_up[e]);
      swiglu(a.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(), hh.data_ptr<scalar_t>(), n * h);  // n contiguous rows
      mm_into(O.narrow(0, o, n), hh, w_out[e]);
    });
    combine(O.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), g.pos_of.data_ptr<int64_t>(), y.data_ptr<scalar_t>(),
            T, k, d);
  });
  return {y, g.slot_of, g.pos_of, g.offset, Xs, Gs, A, U, O};
}

std::vector<at::Tensor> expert_ffn_backward(const at::Tensor& grad_y, const std::vector<at::Tensor>& saved,
                                            const at::Tensor& index, const at::Tensor& weight,
                                            const at::Tensor& gate, const at::Tensor& w_gate,
                                            const at::Tensor& w_up, const at::Tensor& w_out) {
  const at::Tensor &slot_of = saved[0], &pos_of = saved[1], &offset = saved[2], &Xs = saved[3], &Gs = saved[4],
                   &A = saved[5], &U = saved[6], &O = saved[7];
  const int64_t T = grad_y.size(0), d = grad_y.size(1), k = index.size(1), S = T * k;
  const int64_t E = w_up.size(0), h = w_up.size(2), dg = w_gate.size(1);
  const bool per_expert = gate.dim() == 3;

  auto dXs = at::empty_like(Xs);
  auto dGs = per_expert ? at::empty_like(Gs) : dXs;
  auto grad_weight = at::empty_like(weight);
  auto grad_x = at::empty_like(grad_y);
  auto grad_gate = per_expert ? at::zeros_like(gate) : at::Tensor();
  auto dWg = at::empty_like(w_gate), dWu = at::empty_like(w_up), dWo = at::empty_like(w_out);
  const int64_t* off = offset.data_ptr<int64_t>();
  for (int64_t e = 0; e < E; ++e)  // an expert without tokens gets no gradient; the others' are written whole below
    if (off[e + 1] == off[e]) {
      dWg[e].zero_();
      dWu[e].zero_();
      dWo[e].zero_();
    }
  AT_DISPATCH_FLOATING_TYPES(grad_y.scalar_type(), "expert_ffn_backward", [&] {
    for_each_group(offset, [&](int64_t e, int64_t o, int64_t n) {
      at::Tensor dO = at::empty({n, d}, grad_y.options()), da = at::empty({n, h}, grad_y.options()),
                 du = at::empty_like(da), hh = at::empty_like(da);
      output_grads(grad_y.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), O.data_ptr<scalar_t>(),
                   slot_of.data_ptr<int64_t>(), dO.data_ptr<scalar_t>(), grad_weight.data_ptr<scalar_t>(), o, n, k, d);
      mm_into(da, dO, w_out[e].t());  // dH, which the next line turns into dA in place
      swiglu_backward(A.data_ptr<scalar_t>() + o * h, U.data_ptr<scalar_t>() + o * h, da.data_ptr<scalar_t>(),
                      du.data_ptr<scalar_t>(), hh.data_ptr<scalar_t>(), n * h);
      mm_into(dWo[e], hh.t(), dO);
      mm_into(dWg[e], Gs.narrow(0, o, n).t(), da);
      mm_into(dWu[e], Xs.narrow(0, o, n).t(), du);
      mm_into(dXs.narrow(0, o, n), du, w_up[e].t());
      if (per_expert)
        mm_into(dGs.narrow(0, o, n), da, w_gate[e].t());
      else  // the gate's input is x too
        dXs.narrow(0, o, n).addmm_(da, w_gate[e].t());
    });
    const int64_t* pos = pos_of.data_ptr<int64_t>();
    combine<scalar_t>(dXs.data_ptr<scalar_t>(), nullptr, pos, grad_x.data_ptr<scalar_t>(), T, k, d);
    if (per_expert)
      scatter_gate_grad(dGs.data_ptr<scalar_t>(), pos, index.data_ptr<int64_t>(), grad_gate.data_ptr<scalar_t>(), T, k,
                        E, dg);
  });
  return {grad_x, grad_weight, grad_gate, dWg, dWu, dWo};
}
