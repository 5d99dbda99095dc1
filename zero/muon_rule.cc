#include "zero/muon_rule.h"

#include <algorithm>

#include "model/newton_schulz.h"

namespace zt {
namespace {

// buf holds at least n fp32 elements.
float* ensure(Backend* be, DeviceBuffer& buf, size_t n) {
  if (buf.bytes() < n * 4) buf = DeviceBuffer(be, n * 4, MemCategory::kWorkspace);
  return buf.f32();
}

}  // namespace

void MuonRule::update(OptimizerState& state, const UnitSlice& slice, const OptimizerState::Io& io,
                      const OptimizerStep& step) {
  const int u = slice.unit;
  const size_t owned_begin = slice.owned_begin, owned = slice.owned;
  const std::vector<MatrixSlot>& matrices = layout_.hidden_matrices(u);
  OptimizerStep s = step;
  s.offset = 0;
  if (matrices.empty()) {  // AdamW on every element: pass 1 is the whole step
    s.muon_pass = 1;
    state.update(u, io, s);
    return;
  }
  // The matrices' owned elements, in owned coordinates.
  const size_t owned_end = owned_begin + owned;
  std::vector<size_t> spans;
  for (const MatrixSlot& m : matrices) {
    const size_t b = std::max(m.offset, owned_begin);
    const size_t e = std::min(m.offset + (size_t)(m.rows * m.cols), owned_end);
    if (b < e) spans.insert(spans.end(), {b - owned_begin, e - owned_begin});
  }
  s.muon_spans = spans.data();
  s.num_muon_spans = (int)spans.size() / 2;

  // Pass 1: u of the owned elements, into device fp32.
  float* u_owned = ensure(be_, u_owned_, owned);
  OptimizerState::Io first = io;
  first.out = u_owned, first.out_t = DType::kF32, first.out_on_host = false;
  s.muon_pass = 1;
  state.update(u, first, s);
  state.flush();            // an offloaded state's last copies of u are in flight
  float* u_full = u_owned;  // indexed by unit element
  if (slice.sharded) {
    u_full = ensure(be_, u_full_, owned * comm_->world_size());
    comm_->all_gather(u_owned, u_full, owned, DType::kF32).wait();
  }

  // The orthogonalised update of every matrix the owned slice touches, the slice's part kept.
  float* upd = ensure(be_, update_, owned);
  for (const MatrixSlot& m : matrices) {
    const size_t n = (size_t)(m.rows * m.cols);
    const size_t b = std::max(m.offset, owned_begin), e = std::min(m.offset + n, owned_end);
    if (b >= e) continue;
    float* out = ensure(be_, ns_, n);
    newton_schulz5(be_, u_full + m.offset, (int)m.rows, (int)m.cols, out);
    be_->copy(upd + (b - owned_begin), out + (b - m.offset), (e - b) * 4);
  }

  // Pass 2: the update applied to the matrices, every new weight written out.
  OptimizerState::Io second = io;
  second.grad = upd, second.grad_t = DType::kF32, second.grad_on_host = false;
  s.muon_pass = 2;
  s.zero_grad = false;
  state.update(u, second, s);
}

}  // namespace zt
