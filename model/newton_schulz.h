// Muon's orthogonalisation (Jordan et al. 2024, "Muon: an optimizer for hidden layers";
// DeepSpeed's zeropower_via_newtonschulz5 with its aspect-ratio scale, muon_update): five
// quintic Newton-Schulz steps that take a matrix G = U S V^T to about U V^T, the step every
// hidden matrix's momentum takes before Muon applies it (model/optimizer_math.h, pass 2).
#pragma once

#include "model/backend.h"

namespace zt {

// out = NS5(g) * sqrt(max(1, rows / cols)), with X_0 = g / (|g|_F + 1e-7) and, five times,
//   A = X X^T,  B = b A + c A A,  X = a X + B X,   (a, b, c) = (3.4445, -4.7750, 2.0315)
// on the wide orientation (a tall g iterates on X^T X and X B instead of transposing: the same
// matrices). g and out: device fp32, (rows, cols) row-major, rows and cols >= 1; they may not
// overlap. Computed in fp32 on Backend::gemm_f32 (DeepSpeed runs it in bf16 or fp16); its
// workspace, 2 rows x cols + 3 min(rows, cols)^2 floats, comes from the backend per call (its
// block cache on CUDA). Waits for the device once (the norm).
void newton_schulz5(Backend* be, const float* g, int rows, int cols, float* out);

}  // namespace zt
