// Python bindings of the kernels declared in kernels.h (one extension module, built by icml25.ops.build).
#include <torch/extension.h>
#include "kernels.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fp_quantize", &fp_quantize, "block-scaled ExMy fake quantisation of float32/float64 [rows, L] into out");
  m.def("embedding_bag_forward", &embedding_bag_forward, "weighted-sum embedding bag, forward");
  m.def("embedding_bag_backward", &embedding_bag_backward, "weighted-sum embedding bag, sort-by-row backward");
  m.def("expert_ffn_forward", &expert_ffn_forward, "grouped top-k SwiGLU experts, forward");
  m.def("expert_ffn_backward", &expert_ffn_backward, "grouped top-k SwiGLU experts, backward");
}
