"""The compiled-kernel front: each kernel has a pure-PyTorch reference here and a C++ build in kernels/.

- `fp_quantize` / `fp_quantize_ste`: block-scaled fake quantisation to any ExMy format (FP-quantisation chapter);
- `embedding_bag`: the weighted-sum lookup of a product-key memory, forward and backward (Memory Layers);
- `expert_ffn`: top-k dispatch of SwiGLU experts, for a routed MoE and for Autonomy-of-Experts.

Each dispatcher runs the compiled kernel when it built and its reference otherwise; `backend()` says which.
"""

from .build import KernelFallbackWarning, backend, prepare
from .embedding_bag import embedding_bag, embedding_bag_reference
from .expert_ffn import Experts, Routing, expert_ffn, expert_ffn_reference
from .fp_quant import FPFormat, fp_quantize, fp_quantize_reference, fp_quantize_ste

__all__ = ["Experts", "FPFormat", "KernelFallbackWarning", "Routing", "backend", "embedding_bag",
           "embedding_bag_reference", "expert_ffn", "expert_ffn_reference", "fp_quantize", "fp_quantize_reference",
           "fp_quantize_ste", "prepare"]
