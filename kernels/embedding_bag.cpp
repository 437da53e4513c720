// The weighted-sum embedding bag of a product-key memory layer (math: icml25/ops/embedding_bag.py).
//
// forward   out[b]     = sum_k w[b,k] * V[idx[b,k]]                  one thread per bag, SIMD over D, the sums in
//                                                                     registers; the rows of the slots kPrefetch
//                                                                     ahead are prefetched, so the random reads of
//                                                                     V overlap
// backward  dV[n]      = sum_{(b,k): idx[b,k] = n} w[b,k] * dout[b]   a stable sort of the B*K slots by row (each
//                                                                     counting pass shared among the threads), then
//                                                                     each touched row is summed by one thread: no
//                                                                     atomics; dV is dense [N, D] or only the
//                                                                     touched rows (a sparse gradient), on fresh
//                                                                     pages that read as zeros, so each touched
//                                                                     row is written once and no other row at all
//           dw[b,k]    = <dout[b], V[idx[b,k]]>                       one dot product per slot, in the same pass
//                                                                     (each touched row of V read once)
#include "kernels.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
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

// The kLines cache lines from `p` on, brought towards the core ahead of their use.
template <int kLines>
inline void prefetch_lines(const void* p) {
  for (int l = 0; l < kLines; ++l) __builtin_prefetch(static_cast<const char*>(p) + 64 * l);
}

// One bag's output in tiles of kTile values (four cache lines) held in registers across its K slots, each tile
// prefetching its own lines of the row kPrefetch slots ahead (a fixed count, so the prefetches unroll); the tail
// of a row that is not a whole tile is summed in memory. The smallest and largest index are found on the way (the
// range check costs no second pass over the indices), and a row outside the table is never read: the caller raises.
template <typename scalar_t>
std::pair<int64_t, int64_t> forward(const scalar_t* V, const int64_t* idx, const scalar_t* w, scalar_t* out,
                                    int64_t B, int64_t K, int64_t D, int64_t N) {
  constexpr int kLines = 4;
  constexpr int64_t kTile = 64 / sizeof(scalar_t) * kLines;
  const int64_t S = B * K;
  int64_t low = 0, high = 0;
  if (S) low = high = idx[0];
  auto row = [V, D, N](int64_t i) { return V + std::min(std::max(i, int64_t(0)), N - 1) * D; };
#pragma omp parallel for schedule(static) reduction(min : low) reduction(max : high) if (S * D >= kParallelValues)
  for (int64_t b = 0; b < B; ++b) {
    scalar_t* ob = out + b * D;
    for (int64_t s = b * K; s < (b + 1) * K; ++s) {
      low = std::min(low, idx[s]);
      high = std::max(high, idx[s]);
    }
    int64_t d0 = 0;
    for (; d0 + kTile <= D; d0 += kTile) {
      scalar_t acc[kTile] = {};
      for (int64_t s = b * K; s < (b + 1) * K; ++s) {
        if (s + kPrefetch < S) prefetch_lines<kLines>(row(idx[s + kPrefetch]) + d0);
        const scalar_t ws = w[s];
        const scalar_t* r = row(idx[s]) + d0;
#pragma omp simd
        for (int64_t d = 0; d < kTile; ++d) acc[d] = std::fma(ws, r[d], acc[d]);
      }
      for (int64_t d = 0; d < kTile; ++d) ob[d0 + d] = acc[d];
    }
    if (d0 == D) continue;
    for (int64_t d = d0; d < D; ++d) ob[d] = 0;
    for (int64_t s = b * K; s < (b + 1) * K; ++s) {
      if (s + kPrefetch < S) prefetch_lines<kLines>(row(idx[s + kPrefetch]) + d0);
      const scalar_t ws = w[s];
      const scalar_t* r = row(idx[s]);
#pragma omp simd
      for (int64_t d = d0; d < D; ++d) ob[d] = std::fma(ws, r[d], ob[d]);
    }
  }
  return {low, high};
}

// glibc's largest mmap threshold: malloc serves anything bigger from fresh pages, so a tensor of the allocator's
// pays a page fault per page anyway; anything smaller it may serve from memory already mapped and touched.
constexpr int64_t kFreshPagesFrom = int64_t(32) << 20;

// A [rows, D] gradient tensor. From kFreshPagesFrom bytes: on fresh anonymous pages, which read as zeros until
// written, asking the kernel for 2 MiB pages, so a 256 MiB gradient costs 128 page faults, not 65536, and is not
// zeroed and then written. Below that, the allocator's tensor (at ci sizes reused memory: fresh pages cost more),
// zeroed if `zeroed`; else uninitialised, for a caller that writes every row (the sparse gradient's).
at::Tensor gradient_rows(int64_t rows, int64_t D, const at::TensorOptions& options, bool zeroed) {
  const int64_t bytes = rows * D * int64_t(options.dtype().itemsize());
  if (bytes < kFreshPagesFrom) return zeroed ? at::zeros({rows, D}, options) : at::empty({rows, D}, options);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TORCH_CHECK(p != MAP_FAILED, "embedding_bag: cannot map ", bytes, " bytes for the gradient");
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without transparent huge pages it is 4 KiB pages as before
#endif
  return at::from_blob(p, {rows, D}, [bytes](void* q) { munmap(q, bytes); }, options);
}

// The slots sorted by row, stably, and the start of each row's run: the slots of the r-th touched row are
// order[start[r] .. start[r+1]).
struct Runs {
  std::vector<int64_t> order, start;
};

constexpr int64_t kParallelSlots = 1 << 13;  // below this many slots one thread sorts: a fork would cost more

// One stable counting pass, (order, key) -> (order_out, key_out) by bucket(key), shared among the threads: each
// counts the keys of its contiguous chunk of slots, the counts are turned into offsets in (bucket, thread) order,
// and each places its chunk from its own offsets. That is the serial pass's order whatever the number of threads,
// so the backward's sums, and their rounding, do not depend on it.
template <typename Bucket>
void stable_pass(const std::vector<int64_t>& order, const std::vector<int64_t>& key, std::vector<int64_t>& order_out,
                 std::vector<int64_t>& key_out, int64_t buckets, Bucket bucket) {
  const int64_t S = int64_t(key.size());
  const int T = S >= kParallelSlots ? omp_get_max_threads() : 1;
  std::vector<int64_t> count(int64_t(T) * buckets, 0);  // [thread][bucket]
#pragma omp parallel num_threads(T)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = S * t / nt, hi = S * (t + 1) / nt;
    int64_t* mine = count.data() + int64_t(t) * buckets;
    for (int64_t i = lo; i < hi; ++i) ++mine[bucket(key[i])];
#pragma omp barrier
#pragma omp single
    {
      int64_t offset = 0;
      for (int64_t b = 0; b < buckets; ++b)
        for (int u = 0; u < T; ++u) {
          const int64_t n = count[int64_t(u) * buckets + b];
          count[int64_t(u) * buckets + b] = offset;
          offset += n;
        }
    }
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t to = mine[bucket(key[i])]++;
      order_out[to] = order[i];
      key_out[to] = key[i];
    }
  }
}

// The slots sorted by row: for a table of at most S rows one counting pass (its N counters cost no more than the
// slots); for a larger one an LSD radix sort, as few passes of at most kDigit bits as cover the row numbers, the
// bits shared equally between them, each pass reading the keys it carries along sequentially.
Runs sort_by_row(const int64_t* idx, int64_t S, int64_t N) {
  std::vector<int64_t> order(S), key(idx, idx + S), tmp(S), tmp_key(S);
  std::iota(order.begin(), order.end(), 0);
  auto pass = [&](int64_t buckets, auto bucket) {
    stable_pass(order, key, tmp, tmp_key, buckets, bucket);
    std::swap(order, tmp);
    std::swap(key, tmp_key);
  };
  if (N <= S) {
    pass(N, [](int64_t k) { return k; });
  } else {
    int bits = 0;
    while (bits < 63 && (N - 1) >> bits) ++bits;
    const int passes = (bits + kDigit - 1) / kDigit, digit = passes ? (bits + passes - 1) / passes : 0;
    const int64_t mask = (int64_t(1) << digit) - 1;
    for (int shift = 0; shift < bits; shift += digit)
      pass(mask + 1, [shift, mask](int64_t k) { return (k >> shift) & mask; });
  }
  Runs runs{std::move(order), {}};
  for (int64_t i = 0; i < S; ++i)
    if (i == 0 || key[i] != key[i - 1]) runs.start.push_back(i);
  runs.start.push_back(S);
  return runs;
}

// For the r-th touched row n = rows[r] and each of its slots s (bag s / K):
//     grad[r] += w[s] * g[s / K]          (row r of `grad` is row dst(r) of the output, which starts at zero, or
//                                          is zeroed here, in cache, just before its sum, with `zero_rows`)
//     gw[s]    = <g[s / K], V[n]>
// so V[n] is read once for all its slots, in increasing n, with the row kPrefetch runs ahead prefetched.
template <typename scalar_t, typename Dst>
void sum_runs(const Runs& runs, const int64_t* rows, const scalar_t* V, const scalar_t* w, const scalar_t* g,
              scalar_t* grad, scalar_t* gw, int64_t K, int64_t D, Dst dst, bool zero_rows) {
  const int64_t U = int64_t(runs.start.size()) - 1;
#pragma omp parallel for schedule(static) if (int64_t(runs.order.size()) * D >= kParallelValues)
  for (int64_t r = 0; r < U; ++r) {
    if (r + kPrefetch < U) prefetch_row(V + rows[r + kPrefetch] * D, D);
    scalar_t* row = grad + dst(r) * D;
    if (zero_rows) std::fill(row, row + D, scalar_t(0));
    const scalar_t* v = V + rows[r] * D;
    for (int64_t i = runs.start[r]; i < runs.start[r + 1]; ++i) {
      const int64_t s = runs.order[i];
      const scalar_t ws = w[s];
      const scalar_t* gb = g + (s / K) * D;
      scalar_t acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int64_t d = 0; d < D; ++d) {
        row[d] += ws * gb[d];
        acc += gb[d] * v[d];
      }
      gw[s] = acc;
    }
  }
}

}  // namespace

at::Tensor embedding_bag_forward(const at::Tensor& values, const at::Tensor& indices, const at::Tensor& weights) {
  const int64_t B = indices.size(0), K = indices.size(1), D = values.size(1);
  const int64_t N = values.size(0);
  auto out = at::empty({B, D}, values.options());
  TORCH_CHECK_VALUE(N > 0 || indices.numel() == 0, "indices must lie in [0, 0): the table has no rows");
  std::pair<int64_t, int64_t> range;
  AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "embedding_bag_forward", [&] {
    range = forward(values.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(), weights.data_ptr<scalar_t>(),
                    out.data_ptr<scalar_t>(), B, K, D, N);
  });
  TORCH_CHECK_VALUE(indices.numel() == 0 || (range.first >= 0 && range.second < N), "indices must lie in [0, ", N,
                    "); got [", range.first, ", ", range.second, "]");
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
  auto grad_values = gradient_rows(sparse ? U : N, D, values.options(), /*zeroed=*/!sparse);
  auto grad_weights = at::empty_like(weights);
  AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "embedding_bag_backward", [&] {
    const scalar_t* w = weights.data_ptr<scalar_t>();
    const scalar_t* g = grad_out.data_ptr<scalar_t>();
    scalar_t* gv = grad_values.data_ptr<scalar_t>();
    const scalar_t* V = values.data_ptr<scalar_t>();
    scalar_t* gw = grad_weights.data_ptr<scalar_t>();
    if (sparse)
      sum_runs(runs, rp, V, w, g, gv, gw, K, D, [](int64_t r) { return r; }, true);
    else
      sum_runs(runs, rp, V, w, g, gv, gw, K, D, [rp](int64_t r) { return rp[r]; }, false);
  });
  return {grad_values, grad_weights, rows};
}
