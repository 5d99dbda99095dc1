// The rule an optimizer's hyper-parameters choose (zero/optimizer_rule.h): each optimizer that
// is not element-wise names its rule here.
#include "zero/optimizer_rule.h"

#include "zero/muon_rule.h"

namespace zt {

std::unique_ptr<OptimizerRule> make_optimizer_rule(const OptimizerParams& params,
                                                   GroupLr second_group_lr,
                                                   const ParamLayout& layout, Backend* be,
                                                   Communicator* comm) {
  if (const auto* muon = std::get_if<MuonParams>(&params))
    return std::make_unique<MuonRule>(*muon, std::move(second_group_lr), layout, be, comm);
  return std::make_unique<OptimizerRule>(params, std::move(second_group_lr));
}

}  // namespace zt
