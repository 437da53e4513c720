// The compiled CPU kernels of the book (C++ with OpenMP). Each has a pure-PyTorch reference in icml25.ops,
// which documents the math; the Python dispatchers there check arguments before calling in here.
#pragma once
#include <ATen/ATen.h>
#include <vector>

// Threads only pay off on loops that touch at least this many values; on smaller ones (a smoke run, a tiny model)
// the fork and join cost more, and on a loaded machine a join waits for a descheduled thread.
constexpr int64_t kParallelValues = int64_t(1) << 15;

// Block-scaled fake quantisation of a contiguous float32 or float64 [rows, L] tensor onto an ExMy grid with
// M = man_bits mantissa bits, smallest normal exponent emin and largest finite value fpmax, written into `out`
// (x's shape and dtype; may be x itself); block <= 0 means no scaling.
void fp_quantize(const at::Tensor& x, at::Tensor out, int64_t block, int64_t man_bits, int64_t emin, double fpmax,
                 bool saturate);

// out[b] = sum_k weights[b, k] * values[indices[b, k]]
at::Tensor embedding_bag_forward(const at::Tensor& values, const at::Tensor& indices, const at::Tensor& weights);
// {grad_values, grad_weights, rows}: a radix sort of the (bag, slot) pairs by row, then one owner per row.
// grad_values is dense [N, D], or with `sparse` only the touched rows [U, D], whose row numbers are `rows` [U]
// (ascending, distinct).
std::vector<at::Tensor> embedding_bag_backward(const at::Tensor& grad_out, const at::Tensor& values,
                                               const at::Tensor& indices, const at::Tensor& weights, bool sparse);

// Top-k mixture of SwiGLU experts, grouped by expert: see icml25.ops.expert_ffn for the signature and math.
// Returns {y, then the tensors the backward needs}.
std::vector<at::Tensor> expert_ffn_forward(const at::Tensor& x, const at::Tensor& index, const at::Tensor& weight,
                                           const at::Tensor& gate, const at::Tensor& w_gate,
                                           const at::Tensor& w_up, const at::Tensor& w_out);
// {grad_x, grad_weight, grad_gate (empty when the gate input is x), grad_w_gate, grad_w_up, grad_w_out}
std::vector<at::Tensor> expert_ffn_backward(const at::Tensor& grad_y, const std::vector<at::Tensor>& saved,
                                            const at::Tensor& index, const at::Tensor& weight,
                                            const at::Tensor& gate, const at::Tensor& w_gate,
                                            const at::Tensor& w_up, const at::Tensor& w_out);
