// Causal attention with grouped-query K/V on tensor cores, for bf16 / fp16 activations:
// FlashAttention-2's tiling (Dao 2023, "FlashAttention-2: Faster Attention with Better
// Parallelism and Work Partitioning", Algorithms 1 and 2). Math as attention.cu (and
// model/cpu/attention.cc); here every product is an mma.sync m16n8k16 (model/cuda/mma.cuh) with
// fp32 accumulation, and the softmax runs in fp32 in the exp2 domain.
//
// A block is 4 warps; each warp owns 16 rows (query rows in the forward and dQ kernels, key
// rows in the dK/dV kernel), so a block covers 64. Operands are staged in shared memory as
// row-major 16-bit tiles, zero past T and past hd (the head is padded up to HD, a multiple of
// 16, so any hd <= 128 runs), with cp.async (model/cuda/async_copy.cuh): the tiles the loop
// walks are double-buffered, the next one in flight while the products run on this one.
// Fragments come from the tiles by ldmatrix (model/cuda/mma.cuh), .trans for an operand whose k
// runs down the tile (V in P V, K in dS K, dO in P^T dO, Q in dS^T Q); rows padded by 16 bytes
// keep its eight row reads on distinct banks. The A fragments (Q and dO in the forward and dQ
// kernels, K and V in the dK/dV kernel) are read again for each tile, not kept in registers
// across the loop: an eighth (forward) and a third (dQ) more ldmatrix traffic for 16-32 fewer
// registers (at HD 64 the forward's 129 become 103 and dQ's 132 become 106: four blocks an SM,
// not three).
// - Forward: per key tile of 64, S = Q K^T, online softmax (running max m, sum l per row), then
//   P (rounded to 16 bits, as FlashAttention) times V into the fp32 output accumulator. Saves
//   lse = ln(sum_j exp(s_j)) per row.
// - Backward, given D_t = dout_t . out_t (attention.cu): a dQ kernel per query block
//   (P = exp(S - lse), dP = dO V^T, dS = P (dP - D), dQ += dS K over key tiles of 32) and a
//   dK/dV kernel per key block (over every query tile of 32 at or after it, of every query head
//   of its kv group: dV += P^T dO, dK += dS^T Q). Each gradient element has one writer adding
//   in a fixed order: no atomics, and two runs give the same bits.
// - Packed rows (AttnShape::pos): a query attends only keys from its example's first token
//   (first_key), masked per element; a block starts at the tile holding its first query's
//   first key, and the dK/dV kernel stops at the first query tile whose first query's example
//   starts after the block's keys.
#include <type_traits>

#include "model/cuda/async_copy.cuh"
#include "model/cuda/attention.cuh"
#include "model/cuda/cuda_backend.cuh"
#include "model/cuda/mma.cuh"

namespace zt {
namespace {

constexpr int kWarps = 4, kThreadsMma = 32 * kWarps, kRows = 16 * kWarps;  // 64 rows a block
constexpr int kKeysFwd = 64;  // key tile of the forward
constexpr int kTileBwd = 32;  // key tile of dQ, query tile of dK/dV
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// Rows [r0, r0 + n) of one head's hd columns (row r at src + r * stride) into a row-major
// 16-bit tile (ld elements a row), zeros past T and past hd. In 16-byte cp.async pieces, a row's
// pieces on neighbouring threads (coalesced), when hd, the stride and src allow it: they land at
// the caller's cp_async_wait. Otherwise (hd or the stride not a multiple of 8, or src not
// 16-byte aligned) in 2-byte stores, done on return. Either way the caller commits a group, waits
// for it, then synchronises the block.
template <int HD>
__device__ void stage(uint16_t* tile, int ld, const uint16_t* src, size_t stride, int r0, int n,
                      int T, int hd) {
  if (hd % 8 == 0 && stride % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    constexpr int kPieces = HD / 8;  // 16-byte pieces a tile row
    for (int e = threadIdx.x; e < n * kPieces; e += blockDim.x) {
      const int r = e / kPieces, c = 8 * (e % kPieces);
      const bool in = r0 + r < T && c < hd;
      cp_async16(tile + r * ld + c, in ? src + (size_t)(r0 + r) * stride + c : src, in);
    }
    return;
  }
  for (int e = threadIdx.x; e < n * HD; e += blockDim.x) {
    const int r = e / HD, c = e % HD;
    tile[r * ld + c] = r0 + r < T && c < hd ? src[(size_t)(r0 + r) * stride + c] : 0;
  }
}

// Key rows [j0, j0 + n) of one kv head, K (from kh) then V (from vh), into buffer buf of kv
// ([2 buffers][K, V][n] rows of LD); as stage.
template <int HD, int LD>
__device__ __forceinline__ void stage_kv(uint16_t* kv, int buf, int n, const uint16_t* kh,
                                         const uint16_t* vh, const AttnShape& s, int j0) {
  stage<HD>(kv + 2 * buf * n * LD, LD, kh, s.row, j0, n, s.T, s.hd);
  stage<HD>(kv + (2 * buf + 1) * n * LD, LD, vh, s.row, j0, n, s.T, s.hd);
}

// The first key query t of sequence b attends (AttnShape::first_key); kPacked false compiles the
// packed rows' masks away, so whole rows pay nothing for them.
template <bool kPacked>
__device__ __forceinline__ int first_key(const AttnShape& s, int b, int t) {
  return kPacked ? s.first_key(b, t) : 0;
}

// Row max (or sum) of the 4 lanes that share a fragment row.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Two adjacent n-tiles of a C fragment (16 x 16) as the A fragment of the next product.
template <class T>
__device__ __forceinline__ void to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

// acc[n] += A B_n over one k-step kk (16 wide), for the NT (even) n-tiles of 8, B read from a
// row-major 16-bit tile (ld elements a row): with kTrans false B is the tile transposed (B's
// column n is tile row n, its k the tile's columns kk * 16 ..), with kTrans true the tile itself
// (B's k is tile row kk * 16 .., its column n the tile's column n). A is a fragment of Q, dO, K
// or V read by load_a ...
template <class T, bool kTrans, int NT>
__device__ __forceinline__ void mma_step(float (&acc)[NT][4], const uint32_t (&a)[4],
                                         const uint16_t* tile, int ld, int kk) {
#pragma unroll
  for (int n = 0; n < NT; n += 2) {
    uint32_t b[2][2];
    if constexpr (kTrans)
      load_b2_trans(b, tile, ld, n * 8, kk * 16);
    else
      load_b2(b, tile, ld, n * 8, kk * 16);
    mma_m16n8k16<T>(acc[n], a, b[0]);
    mma_m16n8k16<T>(acc[n + 1], a, b[1]);
  }
}
// ... or, over every k-step, from an fp32 C-fragment tile (16 x 16 KT: P or dS), rounded to T.
template <class T, bool kTrans, int N8, int NT>  // N8 = 2 KT n-tiles of c
__device__ __forceinline__ void mma_by_tile(float (&acc)[NT][4], const float (&c)[N8][4],
                                            const uint16_t* tile, int ld) {
#pragma unroll
  for (int kk = 0; kk < N8 / 2; ++kk) {
    uint32_t a[4];
    to_a<T>(a, c[2 * kk], c[2 * kk + 1]);
    mma_step<T, kTrans>(acc, a, tile, ld, kk);
  }
}

// Shared memory: the block's 64 rows (Q, and dO in the dQ kernel; K and V in the dK/dV
// kernel), then two buffers of the tiles the loop walks (K and V; Q and dO, with each query's
// lse, D and first key).
template <int HD>
constexpr size_t forward_smem() {
  return (kRows + 2 * 2 * kKeysFwd) * (HD + 8) * sizeof(uint16_t);
}
template <int HD>
constexpr size_t dq_smem() {
  return (2 * kRows + 2 * 2 * kTileBwd) * (HD + 8) * sizeof(uint16_t);
}
template <int HD>
constexpr size_t dkv_smem() {
  return (2 * kRows + 2 * 2 * kTileBwd) * (HD + 8) * sizeof(uint16_t) +
         2 * kTileBwd * (2 * sizeof(float) + sizeof(int));
}

// Query rows (gridDim.x - 1 - blockIdx.x) * 64.. of (b = blockIdx.z, h = blockIdx.y).
// (At HD 96 packed, ptxas aims at three blocks an SM and spills 12 bytes; two as the minimum
// lets it keep them in registers.)
template <class T, int HD, bool kPacked>
__global__ void __launch_bounds__(kThreadsMma, HD == 96 && kPacked ? 2 : 0)
    mma_forward_kernel(TensorRef out, float* lse, TensorView qkv, AttnShape s) {
  constexpr int LD = HD + 8, kTile = kKeysFwd * LD;
  uint16_t* qs = dynamic_smem<uint16_t>();  // [64][LD]
  uint16_t* kv = qs + kRows * LD;           // [2 buffers][K, V][64][LD]
  const int b = blockIdx.z, h = blockIdx.y, kvh = h / s.group;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // The last query blocks, which have the most keys, first (FlashAttention-2's order).
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows, wrow = q0 + w * 16;
  const int rows[2] = {wrow + g, wrow + g + 8};
  const uint16_t* x = static_cast<const uint16_t*>(qkv.data) + (size_t)b * s.T * s.row;
  const uint16_t *kh = x + (size_t)(s.NH + kvh) * s.hd, *vh = kh + (size_t)s.KVH * s.hd;
  const int last = min(s.T - 1, q0 + kRows - 1);
  const int j_first = first_key<kPacked>(s, b, q0) / kKeysFwd * kKeysFwd;  // <= q0 <= last
  stage<HD>(qs, LD, x + (size_t)h * s.hd, s.row, q0, kRows, s.T, s.hd);
  stage_kv<HD, LD>(kv, 0, kKeysFwd, kh, vh, s, j_first);
  cp_async_commit();  // Q and the first key tile: the loop's first wait lands them
  float o[HD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float sl2 = s.scale * kLog2e;  // scores in the exp2 domain
  int first[2];                        // each row's first key (its example's start; 0 past T)
#pragma unroll
  for (int r = 0; r < 2; ++r) first[r] = rows[r] < s.T ? first_key<kPacked>(s, b, rows[r]) : 0;
  const int wfirst = wrow < s.T ? first_key<kPacked>(s, b, wrow) : 0;
  for (int j0 = j_first, buf = 0; j0 <= last; j0 += kKeysFwd, buf ^= 1) {
    __syncthreads();  // the other buffer's tile is no longer read
    if (j0 + kKeysFwd <= last) stage_kv<HD, LD>(kv, buf ^ 1, kKeysFwd, kh, vh, s, j0 + kKeysFwd);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's copies, the next one's still in flight
    __syncthreads();
    const uint16_t* ks = kv + 2 * buf * kTile;
    const uint16_t* vs = ks + kTile;
    // Every key of the tile comes after the warp's rows, or before their examples.
    if (j0 > wrow + 15 || j0 + kKeysFwd <= wfirst) continue;
    float sc[kKeysFwd / 8][4] = {};
    // S = Q K^T
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t qa[4];
      load_a(qa, qs, LD, w * 16, kk * 16);
      mma_step<T, false>(sc, qa, ks, LD, kk);
    }
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < kKeysFwd / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = j0 + n * 8 + 2 * t + i % 2;
        const bool in = key <= rows[i / 2] && key >= first[i / 2] && key < s.T;
        sc[n][i] = in ? sc[n][i] * sl2 : -INFINITY;
        mx[i / 2] = fmaxf(mx[i / 2], sc[n][i]);
      }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);
      base[r] = mx[r] == -INFINITY ? 0.f : mx[r];  // a row with no key yet: nothing to rescale
      const float corr = exp2f(m[r] - base[r]);
      m[r] = mx[r];
      l[r] *= corr;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) o[n][2 * r] *= corr, o[n][2 * r + 1] *= corr;
    }
#pragma unroll
    for (int n = 0; n < kKeysFwd / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        sc[n][i] = exp2f(sc[n][i] - base[i / 2]);
        l[i / 2] += sc[n][i];
      }
    mma_by_tile<T, true>(o, sc, vs, LD);  // O += P V
  }
  uint16_t* y = static_cast<uint16_t*>(out.data);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    if (rows[r] >= s.T) continue;
    const float inv = 1.f / l[r];
#pragma unroll
    for (int n = 0; n < HD / 8; ++n)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int c = n * 8 + 2 * t + i;
        if (c < s.hd) y[s.o(b, rows[r], h) + c] = to_bits<T>(o[n][2 * r + i] * inv);
      }
    if (t == 0) lse[((size_t)b * s.NH + h) * s.T + rows[r]] = (m[r] + log2f(l[r])) * kLn2;
  }
}

// dQ of query rows (gridDim.x - 1 - blockIdx.x) * 64.. of (b = blockIdx.z, h = blockIdx.y),
// added into dqkv.
// (Packed at HD 32, ptxas aims at more blocks an SM than it has registers for and spills 8
// bytes; one block an SM as the minimum lets it use 103 registers instead.)
template <class T, int HD, bool kPacked>
__global__ void __launch_bounds__(kThreadsMma, kPacked&& HD == 32 ? 1 : 0)
    mma_backward_dq_kernel(TensorRef dqkv, const float* d_rows, TensorView dout, TensorView qkv,
                           const float* lse, AttnShape s) {
  constexpr int LD = HD + 8, kTile = kTileBwd * LD;
  uint16_t* qs = dynamic_smem<uint16_t>();  // [64][LD]
  uint16_t* dos = qs + kRows * LD;          // [64][LD]
  uint16_t* kv = dos + kRows * LD;          // [2 buffers][K, V][32][LD]
  const int b = blockIdx.z, h = blockIdx.y, kvh = h / s.group;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // The last query blocks, which have the most keys, first (FlashAttention-2's order).
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows, wrow = q0 + w * 16;
  const int rows[2] = {wrow + g, wrow + g + 8};
  const uint16_t* x = static_cast<const uint16_t*>(qkv.data) + (size_t)b * s.T * s.row;
  const uint16_t* dy = static_cast<const uint16_t*>(dout.data) + (size_t)b * s.T * s.NH * s.hd;
  const uint16_t *kh = x + (size_t)(s.NH + kvh) * s.hd, *vh = kh + (size_t)s.KVH * s.hd;
  const int last = min(s.T - 1, q0 + kRows - 1);
  const int j_first = first_key<kPacked>(s, b, q0) / kTileBwd * kTileBwd;  // <= q0 <= last
  stage<HD>(qs, LD, x + (size_t)h * s.hd, s.row, q0, kRows, s.T, s.hd);
  stage<HD>(dos, LD, dy + (size_t)h * s.hd, (size_t)s.NH * s.hd, q0, kRows, s.T, s.hd);
  stage_kv<HD, LD>(kv, 0, kTileBwd, kh, vh, s, j_first);
  cp_async_commit();  // Q, dO and the first key tile: the loop's first wait lands them
  float lse2[2], D[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const size_t i = ((size_t)b * s.NH + h) * s.T + rows[r];
    lse2[r] = rows[r] < s.T ? lse[i] * kLog2e : 0.f;
    D[r] = rows[r] < s.T ? d_rows[i] : 0.f;
  }
  const float sl2 = s.scale * kLog2e;
  float dq[HD / 8][4] = {};
  int first[2];  // as the forward's
#pragma unroll
  for (int r = 0; r < 2; ++r) first[r] = rows[r] < s.T ? first_key<kPacked>(s, b, rows[r]) : 0;
  const int wfirst = wrow < s.T ? first_key<kPacked>(s, b, wrow) : 0;
  for (int j0 = j_first, buf = 0; j0 <= last; j0 += kTileBwd, buf ^= 1) {
    __syncthreads();  // the other buffer's tile is no longer read
    if (j0 + kTileBwd <= last) stage_kv<HD, LD>(kv, buf ^ 1, kTileBwd, kh, vh, s, j0 + kTileBwd);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's copies, the next one's still in flight
    __syncthreads();
    const uint16_t* ks = kv + 2 * buf * kTile;
    const uint16_t* vs = ks + kTile;
    if (j0 > wrow + 15 || j0 + kTileBwd <= wfirst) continue;
    float sc[kTileBwd / 8][4] = {}, dp[kTileBwd / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t qa[4], da[4];
      load_a(qa, qs, LD, w * 16, kk * 16);
      mma_step<T, false>(sc, qa, ks, LD, kk);  // S = Q K^T
      load_a(da, dos, LD, w * 16, kk * 16);
      mma_step<T, false>(dp, da, vs, LD, kk);  // dP = dO V^T
    }
#pragma unroll
    for (int n = 0; n < kTileBwd / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = j0 + n * 8 + 2 * t + i % 2, row = rows[i / 2];
        const bool in = key <= row && key >= first[i / 2] && row < s.T;
        const float p = in ? exp2f(sc[n][i] * sl2 - lse2[i / 2]) : 0.f;
        sc[n][i] = p * (dp[n][i] - D[i / 2]);  // dS
      }
    mma_by_tile<T, true>(dq, sc, ks, LD);  // dQ += dS K
  }
  uint16_t* dx = static_cast<uint16_t*>(dqkv.data);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= s.T) continue;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int c = n * 8 + 2 * t + i;
        if (c >= s.hd) continue;
        const size_t e = s.q(b, rows[r], h) + c;
        dx[e] = to_bits<T>(from_bits<T>(dx[e]) + dq[n][2 * r + i] * s.scale);
      }
  }
}

// dK and dV of key rows blockIdx.x * 64.. of (b = blockIdx.z, kv head blockIdx.y), over the
// query rows at or after them of every query head of the group; added into dqkv.
template <class T, int HD, bool kPacked>
__global__ void __launch_bounds__(kThreadsMma)
    mma_backward_dkv_kernel(TensorRef dqkv, const float* d_rows, TensorView dout, TensorView qkv,
                            const float* lse, AttnShape s) {
  constexpr int LD = HD + 8, kTile = kTileBwd * LD;
  uint16_t* ks = dynamic_smem<uint16_t>();  // [64][LD]
  uint16_t* vs = ks + kRows * LD;           // [64][LD]
  uint16_t* qd = vs + kRows * LD;           // [2 buffers][Q, dO][32][LD]
  // [2 buffers][lse * log2 e, D][32], then [2 buffers][32]: each query's first key.
  float* row_terms = reinterpret_cast<float*>(qd + 4 * kTile);
  int* first_keys = reinterpret_cast<int*>(row_terms + 4 * kTileBwd);
  const int b = blockIdx.z, kvh = blockIdx.y;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int k0 = blockIdx.x * kRows, wkey = k0 + w * 16;
  const int keys[2] = {wkey + g, wkey + g + 8};
  const uint16_t* x = static_cast<const uint16_t*>(qkv.data) + (size_t)b * s.T * s.row;
  const uint16_t* dy = static_cast<const uint16_t*>(dout.data) + (size_t)b * s.T * s.NH * s.hd;
  // The query tiles the block walks, head by head of the group: from its first key up to the
  // first tile that starts after the examples of its keys end.
  auto in_range = [&](int t0) { return t0 < s.T && (!kPacked || s.first_key(b, t0) < k0 + kRows); };
  auto stage_queries = [&](int h, int t0, int buf) {
    stage<HD>(qd + 2 * buf * kTile, LD, x + (size_t)h * s.hd, s.row, t0, kTileBwd, s.T, s.hd);
    stage<HD>(qd + (2 * buf + 1) * kTile, LD, dy + (size_t)h * s.hd, (size_t)s.NH * s.hd, t0,
              kTileBwd, s.T, s.hd);
    if (threadIdx.x < kTileBwd) {
      const int q = t0 + threadIdx.x;
      const size_t i = ((size_t)b * s.NH + h) * s.T + q;
      float* terms = row_terms + 2 * buf * kTileBwd;
      terms[threadIdx.x] = q < s.T ? lse[i] * kLog2e : 0.f;
      terms[kTileBwd + threadIdx.x] = q < s.T ? d_rows[i] : 0.f;
      if (kPacked) first_keys[buf * kTileBwd + threadIdx.x] = q < s.T ? s.first_key(b, q) : s.T;
    }
  };
  const int h_end = (kvh + 1) * s.group;
  int h = kvh * s.group, t0 = k0;  // k0 < T, and its example starts at or before it: in range
  stage<HD>(ks, LD, x + (size_t)(s.NH + kvh) * s.hd, s.row, k0, kRows, s.T, s.hd);
  stage<HD>(vs, LD, x + (size_t)(s.NH + s.KVH + kvh) * s.hd, s.row, k0, kRows, s.T, s.hd);
  stage_queries(h, t0, 0);
  cp_async_commit();
  const float sl2 = s.scale * kLog2e;
  float dk[HD / 8][4] = {}, dv[HD / 8][4] = {};
  for (int buf = 0, next_h = h, next_t0 = t0; h < h_end; buf ^= 1, h = next_h, t0 = next_t0) {
    next_t0 = t0 + kTileBwd;
    if (!in_range(next_t0)) ++next_h, next_t0 = k0;
    __syncthreads();  // the other buffer's tile is no longer read
    if (next_h < h_end) stage_queries(next_h, next_t0, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's copies (and K, V), the next one's still in flight
    __syncthreads();
    const uint16_t* qs = qd + 2 * buf * kTile;
    const uint16_t* dos = qs + kTile;
    const float* lse2s = row_terms + 2 * buf * kTileBwd;
    const float* ds_rows = lse2s + kTileBwd;
    const int* firsts = first_keys + buf * kTileBwd;
    // Every query of the tile is before the warp's keys, or its example starts after them.
    if (t0 + kTileBwd - 1 < wkey || (kPacked && firsts[0] > wkey + 15)) continue;
    float sc[kTileBwd / 8][4] = {}, dp[kTileBwd / 8][4] = {};  // S^T and dP^T (keys x queries)
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t ka[4], va[4];
      load_a(ka, ks, LD, w * 16, kk * 16);
      load_a(va, vs, LD, w * 16, kk * 16);
      mma_step<T, false>(sc, ka, qs, LD, kk);   // S^T = K Q^T
      mma_step<T, false>(dp, va, dos, LD, kk);  // dP^T = V dO^T
    }
#pragma unroll
    for (int n = 0; n < kTileBwd / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = n * 8 + 2 * t + i % 2, q = t0 + c, key = keys[i / 2];
        const bool in = q >= key && q < s.T && key < s.T && (!kPacked || firsts[c] <= key);
        const float p = in ? exp2f(sc[n][i] * sl2 - lse2s[c]) : 0.f;
        sc[n][i] = p;                            // P^T
        dp[n][i] = p * (dp[n][i] - ds_rows[c]);  // dS^T
      }
    mma_by_tile<T, true>(dv, sc, dos, LD);  // dV += P^T dO
    mma_by_tile<T, true>(dk, dp, qs, LD);   // dK += dS^T Q
  }
  uint16_t* dx = static_cast<uint16_t*>(dqkv.data);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= s.T) continue;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int c = n * 8 + 2 * t + i;
        if (c >= s.hd) continue;
        const size_t ek = s.k(b, keys[r], kvh) + c, ev = s.v(b, keys[r], kvh) + c;
        dx[ek] = to_bits<T>(from_bits<T>(dx[ek]) + dk[n][2 * r + i] * s.scale);
        dx[ev] = to_bits<T>(from_bits<T>(dx[ev]) + dv[n][2 * r + i]);
      }
  }
}

// Launches F<T, HD, packed> for the smallest HD of {32, 64, 80, 96, 128} that holds hd.
template <template <class, int, bool> class F, class... A>
void dispatch(DType t, int hd, bool packed, A&&... args) {
  auto by_hd = [&](auto tag, auto packed_tag) {
    using T = decltype(tag);
    constexpr bool P = decltype(packed_tag)::value;
    if (hd <= 32) return F<T, 32, P>::run(args...);
    if (hd <= 64) return F<T, 64, P>::run(args...);
    if (hd <= 80) return F<T, 80, P>::run(args...);
    if (hd <= 96) return F<T, 96, P>::run(args...);
    return F<T, 128, P>::run(args...);
  };
  auto by_packed = [&](auto tag) {
    if (packed)
      by_hd(tag, std::true_type{});
    else
      by_hd(tag, std::false_type{});
  };
  if (t == DType::kBF16)
    by_packed(__nv_bfloat16{});
  else
    by_packed(__half{});
}

template <class T, int HD, bool P>
struct Forward {
  static void run(cudaStream_t st, TensorRef out, float* lse, TensorView qkv, const AttnShape& s) {
    allow_smem(mma_forward_kernel<T, HD, P>, forward_smem<HD>());
    const dim3 grid((s.T + kRows - 1) / kRows, s.NH, s.B);
    launch_kernel_smem(mma_forward_kernel<T, HD, P>, grid, kThreadsMma, forward_smem<HD>(), st, out,
                       lse, qkv, s);
  }
};
template <class T, int HD, bool P>
struct Backward {
  static void run(cudaStream_t st, TensorRef dqkv, const float* d_rows, TensorView dout,
                  TensorView qkv, const float* lse, const AttnShape& s) {
    allow_smem(mma_backward_dq_kernel<T, HD, P>, dq_smem<HD>());
    allow_smem(mma_backward_dkv_kernel<T, HD, P>, dkv_smem<HD>());
    const unsigned blocks = (s.T + kRows - 1) / kRows;
    launch_kernel_smem(mma_backward_dq_kernel<T, HD, P>, dim3(blocks, s.NH, s.B), kThreadsMma,
                       dq_smem<HD>(), st, dqkv, d_rows, dout, qkv, lse, s);
    launch_kernel_smem(mma_backward_dkv_kernel<T, HD, P>, dim3(blocks, s.KVH, s.B), kThreadsMma,
                       dkv_smem<HD>(), st, dqkv, d_rows, dout, qkv, lse, s);
  }
};

}  // namespace

bool mma_attention_supports(DType t, int hd) {
  return (t == DType::kBF16 || t == DType::kF16) && hd >= 1 && hd <= 128;
}

void mma_attention_forward(cudaStream_t stream, TensorRef out, float* lse, TensorView qkv,
                           const AttnShape& s) {
  dispatch<Forward>(qkv.dtype, s.hd, s.pos != nullptr, stream, out, lse, qkv, s);
}

void mma_attention_backward(cudaStream_t stream, TensorRef dqkv, const float* d_rows,
                            TensorView dout, TensorView qkv, const float* lse, const AttnShape& s) {
  dispatch<Backward>(qkv.dtype, s.hd, s.pos != nullptr, stream, dqkv, d_rows, dout, qkv, lse, s);
}

}  // namespace zt
