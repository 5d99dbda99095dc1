// See spm_bridge.h: this file must not include any Abseil header.
#include "data/spm_bridge.h"

#include <sentencepiece_processor.h>

namespace zt::spm {

Processor::Processor() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Processor::~Processor() = default;

std::string Processor::load(const std::string& path) {
  const auto status = sp_->Load(path);
  return status.ok() ? std::string() : status.ToString();
}

int Processor::piece_size() const { return sp_->GetPieceSize(); }
int Processor::bos_id() const { return sp_->bos_id(); }
int Processor::eos_id() const { return sp_->eos_id(); }

std::string Processor::encode(std::string_view text, std::vector<int>* ids) const {
  const auto status = sp_->Encode(text, ids);
  return status.ok() ? std::string() : status.ToString();
}

std::string Processor::decode(const std::vector<int>& ids, std::string* text) const {
  const auto status = sp_->Decode(ids, text);
  return status.ok() ? std::string() : status.ToString();
}

const std::string& Processor::id_to_piece(int id) const { return sp_->IdToPiece(id); }
bool Processor::is_byte(int id) const { return sp_->IsByte(id); }
bool Processor::is_control(int id) const { return sp_->IsControl(id); }
bool Processor::is_unknown(int id) const { return sp_->IsUnknown(id); }

}  // namespace zt::spm
