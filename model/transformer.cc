#include "model/transformer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "common/status.h"
#include "common/trace.h"

namespace zt {
namespace {

constexpr size_t kNone = std::numeric_limits<size_t>::max();

// The backend's chunk budget over this model's rows of logits.
int largest_chunk_rows(const Backend& be, int ld, DType t, int N) {
  return logits_chunk_rows(ld, be.classifier_chunk_bytes(), t, N);
}

size_t offset_of(const Unit& u, const char* name) {
  const TensorSlot* s = u.find(name);
  return s ? s->offset : kNone;
}

}  // namespace

// A CPU's cache (32 MiB) or a GPU's memory budget: all N rows of a micro-batch, or a few
// chunks, so (N,V) never has to fit.
int logits_chunk_rows(int ld, size_t chunk_bytes, DType t, int64_t N) {
  const size_t rows = std::clamp<size_t>(chunk_bytes / ((size_t)ld * dtype_size(t)), 1, N);
  return (int)std::min<size_t>(rows, std::numeric_limits<int>::max());
}

// Offsets (elements) of each tensor within its unit; kNone where the architecture has none.
struct Offsets {
  size_t wte, wpe;
  size_t ln1w, ln1b, qkvw, qkvb, attw, attb, ln2w, ln2b, fcw, fcb, fcow, fcob;
  size_t lnfw, lnfb, headw;
};

// One block's intermediates for its backward, sized for (max_B, max_T); N = B*T rows. In the
// activation dtype, except the statistics (means, rstds, lse: fp32).
struct Transformer::BlockActs {
  // lse (B,NH,T): the attention's log-sum-exp per query row (no (B,NH,T,T) probabilities).
  DeviceBuffer ln1, ln1_mean, ln1_rstd, qkv, lse, atty, resid_mid, ln2, ln2_mean, ln2_rstd, fc,
      act;
};

// Activations kept for backward, sized for (max_B, max_T); N = B*T rows.
struct Transformer::Acts {
  Offsets off;
  DeviceBuffer tokens, targets, positions;  // (N) int32
  bool packed = false;                      // this micro-batch has positions
  // Host staging of the ids (tokens, targets, positions: 3 N int32), page-aligned and pinned when
  // the OS allows, so their copies run on the copy stream ahead of the kernels that read them (no
  // host wait inside the step); ids_ticket is the last such copy.
  struct PageFree {
    void operator()(int* p) const { std::free(p); }
  };
  std::unique_ptr<int[], PageFree> staging;
  size_t staging_bytes = 0;
  bool staging_pinned = false;
  uint64_t ids_ticket = 0;
  // The residual stream (N,C) into each block and into the head: all L+1 without
  // checkpointing; with checkpoints every k blocks, x[i] for i < ceil(L/k) is the input of
  // block i k, then k - 1 buffers for the inputs inside a segment, then the head's input.
  std::vector<DeviceBuffer> x;
  std::vector<BlockActs> blocks;         // L sets, or k with checkpointing
  DeviceBuffer lnf, lnf_mean, lnf_rstd;  // (N,C), (N), (N)
  DeviceBuffer logits, losses;           // (chunk, ld) in the activation dtype, (N)
  int ld = 0;                            // the logits' row stride (Backend::logits_row_stride)
  DeviceBuffer dlnf;                     // (N,C) gradient into the final norm's output
  DeviceBuffer dx, dresid, dln, datty, dqkv, dact, dfc;  // backward scratch
  int chunk = 0;
};

static float* at(float* base, size_t off) { return off == kNone ? nullptr : base + off; }
static TensorView at(TensorView base, size_t off) { return off == kNone ? nullptr : base + off; }
static TensorRef at(TensorRef base, size_t off) { return off == kNone ? nullptr : base + off; }
// Element `off` of a unit stored in dtype t (fetch_stored).
static const void* at(const void* base, DType t, size_t off) {
  return off == kNone ? nullptr : static_cast<const char*>(base) + off * dtype_size(t);
}

Transformer::Transformer(const ModelConfig& c, Backend* be, int max_B, int max_T,
                         int checkpoint_every, bool cpu_checkpointing, DType activations)
    : config_(c),
      layout_(c),
      be_(be),
      max_B_(max_B),
      max_T_(max_T),
      checkpoint_every_(std::min(checkpoint_every, c.n_layer)),
      cpu_checkpointing_(cpu_checkpointing && checkpoint_every > 0),
      act_t_(activations),
      a_(std::make_unique<Acts>()) {
  ZT_CHECK(max_T <= c.max_seq_len || !c.learned_positions);
  ZT_CHECK(checkpoint_every >= 0);
  const Unit& emb = layout_.units()[layout_.embedding_unit()];
  const Unit& blk = layout_.units()[layout_.block_unit(0)];
  const Unit& head = layout_.units()[layout_.head_unit()];
  a_->off = {offset_of(emb, "wte"),        offset_of(emb, "wpe"),        offset_of(blk, "ln1.w"),
             offset_of(blk, "ln1.b"),      offset_of(blk, "qkv.w"),      offset_of(blk, "qkv.b"),
             offset_of(blk, "attn_out.w"), offset_of(blk, "attn_out.b"), offset_of(blk, "ln2.w"),
             offset_of(blk, "ln2.b"),      offset_of(blk, "fc.w"),       offset_of(blk, "fc.b"),
             offset_of(blk, "fc_out.w"),   offset_of(blk, "fc_out.b"),   offset_of(head, "lnf.w"),
             offset_of(head, "lnf.b"),     offset_of(head, "lm_head.w")};
  const size_t N = (size_t)max_B * max_T, C = c.hidden, L = c.n_layer;
  const size_t fcw = c.fc_dim();
  const auto A = MemCategory::kActivations;
  auto f32 = [&](size_t n) { return DeviceBuffer(be, n * sizeof(float), A); };
  auto act = [&](size_t n) { return DeviceBuffer(be, n * dtype_size(activations), A); };
  a_->tokens = DeviceBuffer(be, N * sizeof(int), A);
  a_->targets = DeviceBuffer(be, N * sizeof(int), A);
  a_->positions = DeviceBuffer(be, N * sizeof(int), A);
  a_->staging_bytes = (3 * N * sizeof(int) + 4095) / 4096 * 4096;
  a_->staging.reset(static_cast<int*>(std::aligned_alloc(4096, a_->staging_bytes)));
  ZT_CHECK(a_->staging != nullptr);
  a_->staging_pinned = be->pin_host(a_->staging.get(), a_->staging_bytes);
  const size_t k = checkpoint_every_;
  const size_t checkpoints = k == 0 ? 0 : (L + k - 1) / k;
  // See Acts::x; with cpu_checkpointing two device buffers take turns holding the checkpoint
  // in use, and the checkpoints themselves live in host memory.
  const size_t num_x = k == 0 ? L + 1 : (cpu_checkpointing_ ? std::min<size_t>(2, checkpoints) : checkpoints) + k;
  for (size_t i = 0; i < num_x; ++i) a_->x.push_back(act(N * C));
  if (cpu_checkpointing_) {
    const size_t bytes = N * C * dtype_size(activations);
    host_checkpoints_.assign(checkpoints, std::vector<char>(bytes));
    host_.on_alloc(MemCategory::kActivations, checkpoints * bytes);
  }
  for (size_t l = 0; l < (k == 0 ? L : k); ++l)
    a_->blocks.push_back({act(N * C), f32(N), f32(N), act(N * c.qkv_dim()),
                          f32((size_t)max_B * c.n_head * max_T), act(N * c.attn_dim()), act(N * C),
                          act(N * C), f32(N), f32(N), act(N * fcw), act(N * c.intermediate)});
  a_->lnf = act(N * C);
  a_->lnf_mean = f32(N);
  a_->lnf_rstd = f32(N);
  a_->ld = be->logits_row_stride(c.vocab_size);
  a_->chunk = largest_chunk_rows(*be, a_->ld, activations, N);
  a_->logits = act((size_t)a_->chunk * a_->ld);
  a_->losses = f32(N);
  a_->dlnf = act(N * C);
  a_->dx = act(N * C);
  a_->dresid = act(N * C);
  a_->dln = act(N * C);
  a_->datty = act(N * c.attn_dim());
  a_->dqkv = act(N * c.qkv_dim());
  a_->dact = act(N * c.intermediate);
  a_->dfc = act(N * fcw);
}

Transformer::~Transformer() {
  be_->wait_copy(a_->ids_ticket);
  if (a_->staging_pinned) be_->unpin_host(a_->staging.get(), a_->staging_bytes);
}

Transformer::BlockActs& Transformer::acts_of(int l) {
  return a_->blocks[checkpoint_every_ == 0 ? l : l % checkpoint_every_];
}

TensorRef Transformer::block_input(int l) {
  const int k = checkpoint_every_, L = config_.n_layer;
  if (k == 0) return act(a_->x[l]);
  const int checkpoints = (L + k - 1) / k;
  const int on_device = cpu_checkpointing_ ? std::min(2, checkpoints) : checkpoints;
  if (l == L) return act(a_->x.back());
  if (l % k != 0) return act(a_->x[on_device + l % k - 1]);
  return act(a_->x[cpu_checkpointing_ ? (l / k) % on_device : l / k]);
}

void Transformer::save_checkpoint(int i) {
  if (!cpu_checkpointing_ || i * checkpoint_every_ >= config_.n_layer) return;
  const TensorRef x = block_input(i * checkpoint_every_);
  be_->copy_to_host(host_checkpoints_[i].data(), x.data, x.bytes((size_t)B_ * T_ * config_.hidden));
}

void Transformer::restore_checkpoint(int i) {
  if (!cpu_checkpointing_) return;
  const TensorRef x = block_input(i * checkpoint_every_);
  be_->copy_to_device(x.data, host_checkpoints_[i].data(),
                      x.bytes((size_t)B_ * T_ * config_.hidden));
}

void Transformer::norm_forward(TensorRef out, float* mean, float* rstd, TensorView x, TensorView w,
                               TensorView b, int N) {
  const int C = config_.hidden;
  if (config_.norm == NormKind::kLayerNorm)
    be_->layernorm_forward(out, mean, rstd, x, w, b, N, C, config_.norm_eps);
  else
    be_->rmsnorm_forward(out, rstd, x, w, N, C, config_.norm_eps);
}

void Transformer::residual_norm_forward(TensorRef x, TensorView residual, TensorRef out,
                                        float* mean, float* rstd, TensorView w, TensorView b,
                                        int N) {
  const int C = config_.hidden;
  if (config_.norm == NormKind::kLayerNorm)
    be_->residual_layernorm_forward(x, residual, out, mean, rstd, w, b, N, C, config_.norm_eps);
  else
    be_->residual_rmsnorm_forward(x, residual, out, rstd, w, N, C, config_.norm_eps);
}

void Transformer::norm_backward(TensorRef dx, TensorRef dw, TensorRef db, TensorView dout,
                                TensorView x, TensorView w, const float* mean, const float* rstd,
                                int N) {
  const int C = config_.hidden;
  if (config_.norm == NormKind::kLayerNorm)
    be_->layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
  else
    be_->rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
}

const int* Transformer::positions() const {
  return a_->packed ? static_cast<const int*>(a_->positions.data()) : nullptr;
}

void Transformer::embed(UnitEngine& e, const int* tokens, const int* targets, int B, int T,
                        const int* positions) {
  ZT_CHECK(B <= max_B_ && T <= max_T_ && B > 0 && T > 0);
  B_ = B, T_ = T;
  const size_t n = (size_t)B * T, max_n = (size_t)max_B_ * max_T_;
  be_->wait_copy(a_->ids_ticket);  // the staging's previous copies are done (long since)
  int* host = a_->staging.get();
  std::memcpy(host, tokens, n * sizeof(int));
  a_->ids_ticket = be_->copy_to_device_async(a_->tokens.data(), host, n * sizeof(int));
  if (targets) {
    std::memcpy(host + max_n, targets, n * sizeof(int));
    a_->ids_ticket = be_->copy_to_device_async(a_->targets.data(), host + max_n, n * sizeof(int));
  }
  a_->packed = positions != nullptr;
  if (positions) {
    for (size_t i = 0; i < n; ++i)  // each example's positions count up from 0
      ZT_CHECK(positions[i] == 0 || (i % T > 0 && positions[i] == positions[i - 1] + 1));
    std::memcpy(host + 2 * max_n, positions, n * sizeof(int));
    a_->ids_ticket =
        be_->copy_to_device_async(a_->positions.data(), host + 2 * max_n, n * sizeof(int));
  }
  TraceSpan span(Track::kCompute, "embedding");
  const int u = layout_.embedding_unit();
  DType t;  // the lookup widens only its rows, not the whole (vocabulary-sized) unit
  const void* p = e.fetch_stored(u, &t);
  be_->embedding_forward(block_input(0), static_cast<const int*>(a_->tokens.data()),
                         at(p, t, a_->off.wte), at(p, t, a_->off.wpe), t, B, T, config_.hidden,
                         this->positions());
  e.release(u);
}

// A block's parameters as stored: every kernel they reach takes each weight once per pass, so
// a backend whose kernels compute in fp32 widens them one tensor at a time, in cache
// (CpuBackend::widen), instead of the engine widening the whole unit to memory at fetch.
static TensorView fetch_block(UnitEngine& e, int u) {
  DType t;
  const void* p = e.fetch_stored(u, &t);
  return {p, t};
}

void Transformer::block_forward(UnitEngine& e, int l) {
  TraceSpan span(Track::kCompute, "forward block", l);
  const int u = layout_.block_unit(l);
  block_compute(fetch_block(e, u), l);
  e.release(u);
}

void Transformer::block_compute(TensorView p, int l) {
  const ModelConfig& c = config_;
  const Offsets& o = a_->off;
  const int N = B_ * T_, C = c.hidden, I = c.intermediate, QKV = c.qkv_dim();
  BlockActs& b = acts_of(l);
  const TensorRef x = block_input(l), ln1 = act(b.ln1);
  norm_forward(ln1, b.ln1_mean.f32(), b.ln1_rstd.f32(), x, p + o.ln1w, at(p, o.ln1b), N);
  const TensorRef qkv = act(b.qkv);  // (N, QKV), q and k after RoPE
  be_->matmul_forward(qkv, ln1, p + o.qkvw, at(p, o.qkvb), N, C, QKV);
  if (c.rope())
    be_->rope(qkv, B_, T_, c.n_head, c.n_kv_head, c.head_dim(), c.rope_params(), false, 0,
              positions());
  be_->attention_forward(act(b.atty), b.lse.f32(), qkv, B_, T_, c.n_head, c.n_kv_head, c.head_dim(),
                         positions());
  block_tail(p, x, act(b.atty), act(b.resid_mid), act(b.ln2), b.ln2_mean.f32(), b.ln2_rstd.f32(),
             act(b.fc), act(b.act), block_input(l + 1), N);
}

void Transformer::block_tail(TensorView p, TensorView x, TensorView atty, TensorRef mid,
                             TensorRef ln2, float* ln2_mean, float* ln2_rstd, TensorRef fc,
                             TensorRef act, TensorRef out, int N) {
  const ModelConfig& c = config_;
  const Offsets& o = a_->off;
  const int C = c.hidden, I = c.intermediate;
  be_->matmul_forward(mid, atty, p + o.attw, at(p, o.attb), N, c.attn_dim(), C);  // x + attn_out
  residual_norm_forward(mid, x, ln2, ln2_mean, ln2_rstd, p + o.ln2w, at(p, o.ln2b), N);
  if (c.mlp == MlpKind::kGelu) {  // fc (N, I), or (N, 2I) = [gate | up] for SwiGLU; act (N, I)
    be_->matmul_gelu_forward(act, fc, ln2, p + o.fcw, at(p, o.fcb), N, C, I);
  } else {
    be_->matmul_forward(fc, ln2, p + o.fcw, at(p, o.fcb), N, C, 2 * I);
    be_->swiglu_forward(act, fc, N, I);
  }
  be_->matmul_forward(out, act, p + o.fcow, at(p, o.fcob), N, I, C);  // x is read no more
  be_->add_inplace(out, mid, (size_t)N * C);
}

int Transformer::classifier_chunk_rows() const { return a_->chunk; }

void Transformer::copy_logits_to_host(float* out, int rows) {
  const int V = config_.vocab_size, ld = a_->ld;
  const size_t n = (size_t)rows * ld;
  DeviceBuffer wide;
  const float* src = a_->logits.f32();  // fp32 activations: as they are
  if (act_t_ != DType::kF32) {
    wide = DeviceBuffer(be_, n * sizeof(float), MemCategory::kWorkspace);
    be_->convert(a_->logits.data(), act_t_, wide.data(), DType::kF32, n);
    src = wide.f32();
  }
  if (ld == V) return be_->copy_to_host(out, src, n * sizeof(float));
  std::vector<float> padded(n);  // one copy, then the padding dropped here
  be_->copy_to_host(padded.data(), src, n * sizeof(float));
  for (int r = 0; r < rows; ++r)
    std::copy_n(padded.data() + (size_t)r * ld, V, out + (size_t)r * V);
}

void Transformer::set_classifier_chunk_rows(int rows) {
  a_->chunk = std::clamp(rows, 1, largest_chunk_rows(*be_, a_->ld, act_t_, max_B_ * max_T_));
}

double Transformer::head(UnitEngine& e, bool loss, int rows_from, int rows, bool train,
                         float dscale, float* logits_host) {
  TraceSpan span(Track::kCompute, train ? "head forward and backward" : "head");
  const ModelConfig& c = config_;
  const Offsets& o = a_->off;
  const int N = B_ * T_, C = c.hidden, V = c.vocab_size;
  const int hu = layout_.head_unit(), eu = layout_.embedding_unit();
  // As stored, as a block's: each chunk's GEMMs widen the vocabulary-sized weight a block of
  // rows at a time, in cache, which reads less memory than a widened copy would (CPU).
  const TensorView ph = fetch_block(e, hu);
  const TensorView pw = c.tied_embeddings ? fetch_block(e, eu) + o.wte : ph + o.headw;  // (V,C)
  const TensorRef x = block_input(c.n_layer), lnf = act(a_->lnf);
  norm_forward(lnf, a_->lnf_mean.f32(), a_->lnf_rstd.f32(), x, ph + o.lnfw, at(ph, o.lnfb), N);
  float* gh = train ? e.grads(hu) : nullptr;
  float* gw = train ? (c.tied_embeddings ? e.grads(eu) + o.wte : gh + o.headw) : nullptr;
  if (train) zero(act(a_->dlnf), (size_t)N * C);
  for (int r0 = rows_from; r0 < rows_from + rows; r0 += a_->chunk) {
    const int nr = std::min(a_->chunk, rows_from + rows - r0);
    const TensorRef logits = act(a_->logits);  // (nr, ld): V columns, then padding
    be_->matmul_forward(logits, lnf + (size_t)r0 * C, pw, nullptr, nr, C, V, a_->ld);
    if (logits_host) copy_logits_to_host(logits_host + (size_t)(r0 - rows_from) * V, nr);
    if (!loss) continue;
    be_->crossentropy_forward_backward(logits, a_->ld, a_->losses.f32() + r0,
                                       static_cast<const int*>(a_->targets.data()) + r0, nr, V,
                                       train ? dscale : 0.f);
    if (train && dscale != 0.f)
      be_->matmul_backward(act(a_->dlnf) + (size_t)r0 * C, gw, nullptr, logits,
                           lnf + (size_t)r0 * C, pw, nr, C, V, a_->ld);
  }
  if (train) {  // final norm backward: dx (N,C) = d(norm_f)/dx . dlnf
    const TensorRef dx = act(a_->dx);
    zero(dx, (size_t)N * C);
    norm_backward(dx, gh + o.lnfw, at(gh, o.lnfb), act(a_->dlnf), x, ph + o.lnfw,
                  a_->lnf_mean.f32(), a_->lnf_rstd.f32(), N);
    e.reduce_gradients(hu);
  }
  // The losses come back once, after everything above is queued: a GPU is not left idle
  // between chunks while the host waits for each.
  double loss_sum = 0.0;
  if (loss) {
    std::vector<float> losses(rows);
    be_->copy_to_host(losses.data(), a_->losses.f32() + rows_from, sizeof(float) * rows);
    for (float l : losses) loss_sum += l;
  }
  if (c.tied_embeddings) e.release(eu);
  e.release(hu);
  return loss_sum;
}

Transformer::LossResult Transformer::forward(UnitEngine& e, const int* tokens, const int* targets,
                                             int B, int T, float grad_scale, const int* positions,
                                             double denominator) {
  embed(e, tokens, targets, B, T, positions);
  const bool train = grad_scale != 0.f;  // evaluation keeps no checkpoints
  if (train) save_checkpoint(0);
  for (int l = 0; l < config_.n_layer; ++l) {
    block_forward(e, l);
    if (train && checkpoint_every_ > 0 && (l + 1) % checkpoint_every_ == 0)
      save_checkpoint((l + 1) / checkpoint_every_);
  }
  LossResult r;
  for (int i = 0; i < B * T; ++i) r.num_valid += targets[i] >= 0;
  if (denominator <= 0) denominator = r.num_valid;
  const float dscale = r.num_valid > 0 ? grad_scale / static_cast<float>(denominator) : 0.f;
  // With no valid target the gradient is zero, but the head's backward still runs so every
  // rank makes the same engine calls.
  r.sum = head(e, true, 0, B * T, grad_scale != 0.f, dscale, nullptr);
  r.loss = r.num_valid > 0 ? r.sum / r.num_valid : 0.0;
  return r;
}

void Transformer::block_backward(UnitEngine& e, int l) {
  TraceSpan span(Track::kCompute, "backward block", l);
  const ModelConfig& c = config_;
  const Offsets& o = a_->off;
  const int N = B_ * T_, C = c.hidden, I = c.intermediate, QKV = c.qkv_dim();
  const size_t NC = (size_t)N * C;
  const int u = layout_.block_unit(l);
  const TensorView p = fetch_block(e, u);
  const TensorRef g = e.grads_stored(u);  // each tensor's gradient gets one contribution here
  BlockActs& b = acts_of(l);
  const TensorRef dx = act(a_->dx);  // in: d x[l+1]; out: d x[l]
  const TensorRef dresid = act(a_->dresid);
  // MLP: out = mid + act @ Wfco^T
  const TensorRef dact = act(a_->dact);
  const TensorRef dfc = act(a_->dfc);
  // GELU: dfc = (dx Wfco) gelu'(fc), dact the scratch of backends that do not fuse.
  if (c.mlp == MlpKind::kGelu) {
    be_->matmul_dgelu_backward(dfc, dact, g + o.fcow, at(g, o.fcob), dx, act(b.act), p + o.fcow,
                               act(b.fc), N, I, C);
  } else {
    zero(dact, (size_t)N * I);
    be_->matmul_backward(dact, g + o.fcow, at(g, o.fcob), dx, act(b.act), p + o.fcow, N, I, C);
    be_->swiglu_backward(dfc, dact, act(b.fc), N, I);
  }
  const TensorRef dln = act(a_->dln);
  zero(dln, NC);
  be_->matmul_backward(dln, g + o.fcw, at(g, o.fcb), dfc, act(b.ln2), p + o.fcw, N, C,
                       c.fc_dim());
  be_->copy(dresid.data, dx.data, dx.bytes(NC));  // residual path
  norm_backward(dresid, g + o.ln2w, at(g, o.ln2b), dln, act(b.resid_mid), p + o.ln2w,
                b.ln2_mean.f32(), b.ln2_rstd.f32(), N);
  // Attention: mid = x + atty @ Wo^T
  const TensorRef datty = act(a_->datty);
  zero(datty, (size_t)N * c.attn_dim());
  be_->matmul_backward(datty, g + o.attw, at(g, o.attb), dresid, act(b.atty), p + o.attw, N,
                       c.attn_dim(), C);
  const TensorRef dqkv = act(a_->dqkv);
  zero(dqkv, (size_t)N * QKV);
  be_->attention_backward(dqkv, datty, act(b.qkv), act(b.atty), b.lse.f32(), B_, T_, c.n_head,
                          c.n_kv_head, c.head_dim(), positions());
  if (c.rope())
    be_->rope(dqkv, B_, T_, c.n_head, c.n_kv_head, c.head_dim(), c.rope_params(), true, 0,
              positions());
  zero(dln, NC);
  be_->matmul_backward(dln, g + o.qkvw, at(g, o.qkvb), dqkv, act(b.ln1), p + o.qkvw, N, C, QKV);
  be_->copy(dx.data, dresid.data, dx.bytes(NC));
  norm_backward(dx, g + o.ln1w, at(g, o.ln1b), dln, block_input(l), p + o.ln1w, b.ln1_mean.f32(),
                b.ln1_rstd.f32(), N);
  e.reduce_gradients(u);
  e.release(u);
}

void Transformer::backward(UnitEngine& e) {
  const int L = config_.n_layer, k = checkpoint_every_;
  if (k == 0) {
    for (int l = L - 1; l >= 0; --l) block_backward(e, l);
  } else {  // segment by segment from the last: recompute its forward, then go back through it
    for (int first = (L - 1) / k * k; first >= 0; first -= k) {
      const int end = std::min(first + k, L);
      // The segment's last block rewrites the next checkpoint (or the head's input) with the
      // same values; the others refill the segment's buffers.
      const auto t0 = std::chrono::steady_clock::now();
      restore_checkpoint(first / k);  // cpu_checkpointing: the segment's input comes back
      for (int l = first; l < end; ++l) block_forward(e, l);
      recompute_ms_ += std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - t0)
                           .count();
      for (int l = end - 1; l >= first; --l) block_backward(e, l);
    }
  }
  TraceSpan span(Track::kCompute, "embedding backward");
  const int u = layout_.embedding_unit();
  float* g = e.grads(u);
  be_->embedding_backward(g + a_->off.wte, at(g, a_->off.wpe), act(a_->dx),
                          static_cast<const int*>(a_->tokens.data()), B_, T_, config_.hidden,
                          positions());
  e.reduce_gradients(u);
}

void Transformer::logits(UnitEngine& e, const int* tokens, int B, int T, float* out_host) {
  embed(e, tokens, nullptr, B, T);
  for (int l = 0; l < config_.n_layer; ++l) block_forward(e, l);
  head(e, false, 0, B * T, false, 0.f, out_host);
}

void Transformer::decode(UnitEngine& e, int token, int pos, float* logits_host) {
  const ModelConfig& c = config_;
  const Offsets& o = a_->off;
  ZT_CHECK(pos >= 0 && pos < max_T_);
  const int C = c.hidden, I = c.intermediate, QKV = c.qkv_dim(), V = c.vocab_size;
  const auto W = MemCategory::kWorkspace;
  const size_t as = dtype_size(act_t_);
  if (cache_.empty())
    for (int l = 0; l < c.n_layer; ++l) cache_.emplace_back(be_, (size_t)max_T_ * QKV * as, W);
  auto f32 = [&](size_t n) { return DeviceBuffer(be_, n * sizeof(float), W); };
  auto row = [&](size_t n) { return DeviceBuffer(be_, n * as, W); };
  // One row: the residual stream, a norm's output and statistics, the attention's output, the
  // residual after it, the MLP's fc and activation (activation dtype), the logits (fp32).
  DeviceBuffer xb = row(C), lnb = row(C), mean = f32(1), rstd = f32(1), attyb = row(c.attn_dim()),
               midb = row(C), fcb = row(c.fc_dim()), actb = row(I), logits = f32(V),
               tok(be_, sizeof(int), W);
  const TensorRef x = act(xb), ln = act(lnb), atty = act(attyb);
  be_->copy_to_device(tok.data(), &token, sizeof(int));
  const int eu = layout_.embedding_unit();
  DType et;
  const void* pe = e.fetch_stored(eu, &et);  // learned positions: row pos of wpe, as if t were pos
  be_->embedding_forward(x, static_cast<const int*>(tok.data()), at(pe, et, o.wte),
                         at(pe, et, o.wpe == kNone ? kNone : o.wpe + (size_t)pos * C), et, 1, 1, C);
  e.release(eu);
  for (int l = 0; l < c.n_layer; ++l) {
    const int u = layout_.block_unit(l);
    const TensorView p = fetch_block(e, u);
    norm_forward(ln, mean.f32(), rstd.f32(), x, p + o.ln1w, at(p, o.ln1b), 1);
    const TensorRef qkv = act(cache_[l]), here = qkv + (size_t)pos * QKV;  // this q, k, v
    be_->matmul_forward(here, ln, p + o.qkvw, at(p, o.qkvb), 1, C, QKV);
    if (c.rope())
      be_->rope(here, 1, 1, c.n_head, c.n_kv_head, c.head_dim(), c.rope_params(), false, pos);
    be_->attention_decode(atty, qkv, pos + 1, c.n_head, c.n_kv_head, c.head_dim());
    block_tail(p, x, atty, act(midb), ln, mean.f32(), rstd.f32(), act(fcb), act(actb), x,
               1);  // the block's output replaces its input
    e.release(u);
  }
  const int hu = layout_.head_unit();
  const TensorView ph = e.fetch(hu);
  const TensorView pw = c.tied_embeddings ? e.fetch(eu) + o.wte : ph + o.headw;  // (V,C)
  norm_forward(ln, mean.f32(), rstd.f32(), x, ph + o.lnfw, at(ph, o.lnfb), 1);
  be_->matmul_forward(logits.f32(), ln, pw, nullptr, 1, C, V);
  be_->copy_to_host(logits_host, logits.data(), sizeof(float) * V);
  if (c.tied_embeddings) e.release(eu);
  e.release(hu);
}

void Transformer::last_logits(UnitEngine& e, const int* tokens, int T, float* out_host) {
  embed(e, tokens, nullptr, 1, T);
  for (int l = 0; l < config_.n_layer; ++l) block_forward(e, l);
  head(e, false, T - 1, 1, false, 0.f, out_host);
}

}  // namespace zt
