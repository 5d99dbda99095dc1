// The plain causal attention with grouped-query K/V that stores its softmax probabilities
// att (B,NH,T,T) for the backward: O(T^2) memory. Shapes as Backend::attention_forward; the
// backward adds into dqkv. The reference for tests and benchmarks of the CPU backend's
// attention, which keeps only the log-sum-exp.
#pragma once

namespace zt {

void reference_attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH,
                                 int KVH, int hd);
void reference_attention_backward(float* dqkv, const float* dout, const float* qkv,
                                  const float* att, int B, int T, int NH, int KVH, int hd);

}  // namespace zt
