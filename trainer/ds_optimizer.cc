// The ds_config's optimizer and scheduler sections (trainer/ds_config.h), and the resolved
// values that change a run's numbers written back as JSON.
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "trainer/ds_config.h"
#include "trainer/ds_reader.h"

namespace zt {
namespace ds {

// ----- optimizer ------------------------------------------------------------------------

// params.betas: two numbers, each in [0, 1).
absl::Status read_betas(ObjectReader& p, double* beta1, double* beta2) {
  ZT_ASSIGN_OR_RETURN(const json* betas, p.raw({"betas"}));
  if (!betas) return absl::OkStatus();
  const bool ok =
      betas->is_array() && betas->size() == 2 && (*betas)[0].is_number() && (*betas)[1].is_number();
  if (!ok)
    return p.error("betas",
                   absl::StrCat("expected two numbers [beta1, beta2], got ", show(*betas)));
  *beta1 = (*betas)[0].get<double>();
  *beta2 = (*betas)[1].get<double>();
  for (double b : {*beta1, *beta2})
    if (!(b >= 0.0 && b < 1.0))
      return p.error("betas", absl::StrCat("value ", show(*betas),
                                           " is out of range; allowed: each beta in [0, 1)"));
  return absl::OkStatus();
}

// params.eps (> 0); fallback: DeepSpeed's default, for the message.
absl::Status read_eps(const std::string& src, ObjectReader& p, double* eps, const char* fallback) {
  ZT_RETURN_IF_ERROR(p.get_double({"eps"}, eps, 0.0));
  if (*eps <= 0)
    return absl::InvalidArgumentError(absl::StrCat(
        src,
        ": optimizer.params.eps must be > 0 (with 0 the update divides 0 by 0 wherever a "
        "gradient is 0); DeepSpeed's default is ",
        fallback));
  return absl::OkStatus();
}

absl::Status refuse_amsgrad(const std::string& src, ObjectReader& p) {
  bool amsgrad = false;
  ZT_RETURN_IF_ERROR(p.get_bool({"amsgrad"}, &amsgrad));
  if (amsgrad)
    return absl::UnimplementedError(
        absl::StrCat(src,
                     ": optimizer.params.amsgrad: AMSGrad is not implemented in this build; "
                     "set it to false or remove it"));
  return absl::OkStatus();
}

// Each type's params, DeepSpeed's names and defaults, into its own struct. adamw_type: the
// type was "AdamW" (its weight decay is decoupled whatever adam_w_mode says).
struct ParamsReader {
  const std::string& src;
  ObjectReader& p;
  OptimizerConfig* o;
  bool adamw_type;

  absl::Status operator()(AdamWParams& a) {
    ZT_RETURN_IF_ERROR(p.get_double({"weight_decay"}, &a.weight_decay, 0.0));
    ZT_RETURN_IF_ERROR(read_betas(p, &a.beta1, &a.beta2));
    ZT_RETURN_IF_ERROR(read_eps(src, p, &a.eps, "1e-8"));
    ZT_RETURN_IF_ERROR(p.get_bool({"bias_correction"}, &a.bias_correction));
    ZT_RETURN_IF_ERROR(p.get_bool({"adam_w_mode"}, &a.adam_w_mode));
    // DeepSpeed engine: effective_adam_w_mode = (name == "adamw") or adam_w_mode.
    a.adam_w_mode = adamw_type || a.adam_w_mode;
    bool torch_adam = false;  // accepted, no effect here
    ZT_RETURN_IF_ERROR(p.get_bool({"torch_adam"}, &torch_adam));
    return refuse_amsgrad(src, p);
  }
  absl::Status operator()(LionParams& l) {
    ZT_RETURN_IF_ERROR(p.get_double({"weight_decay"}, &l.weight_decay, 0.0));
    return read_betas(p, &l.beta1, &l.beta2);
  }
  absl::Status operator()(AdagradParams& g) {
    ZT_RETURN_IF_ERROR(p.get_double({"weight_decay"}, &g.weight_decay, 0.0));
    ZT_RETURN_IF_ERROR(read_eps(src, p, &g.eps, "1e-10"));
    ZT_RETURN_IF_ERROR(p.get_double({"lr_decay"}, &g.lr_decay, 0.0));
    ZT_RETURN_IF_ERROR(refuse_amsgrad(src, p));
    p.unsupported("initial_accumulator_value", 0.0);
    return absl::OkStatus();
  }
  // The matrices' momentum, then its AdamW's betas, eps and weight decay (both halves').
  absl::Status operator()(MuonParams& m) {
    ZT_RETURN_IF_ERROR(p.get_double({"weight_decay"}, &m.adam.weight_decay, 0.0));
    ZT_RETURN_IF_ERROR(p.get_double({"momentum"}, &m.momentum, 0.0, false, 1.0));
    ZT_RETURN_IF_ERROR(read_betas(p, &m.adam.beta1, &m.adam.beta2));
    ZT_RETURN_IF_ERROR(read_eps(src, p, &m.adam.eps, "1e-10"));
    ZT_RETURN_IF_ERROR(p.get_bool({"adam_w_mode"}, &m.adam.adam_w_mode));
    // Both run in fp32 here: "gram" is the same iteration on the Gram matrix.
    ZT_RETURN_IF_ERROR(p.get_choice({"ns_method"}, {"gram", "standard"}, false, &o->ns_method));
    // Each half's lr (DeepSpeed's engine: muon_lr / adam_lr over the shared lr; the defaults
    // of a half given neither follow in parse_optimizer). o->lr is the matrices'.
    o->adam_lr = o->lr;
    ZT_RETURN_IF_ERROR(p.get_double({"muon_lr"}, &o->lr, 0.0));
    return p.get_double({"adam_lr"}, &o->adam_lr, 0.0);
  }
};

absl::Status parse_optimizer(const std::string& src, const json& v, OptimizerConfig* o) {
  constexpr const char* kTypes = "\"Adam\", \"AdamW\", \"Lion\", \"Adagrad\" or \"Muon\"";
  ZT_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::make(&src, v, "optimizer"));
  o->specified = true;
  ZT_ASSIGN_OR_RETURN(const json* type, r.raw({"type"}));
  if (!type) return r.error("type", absl::StrCat("missing; give ", kTypes));
  if (!type->is_string()) {
    return r.error("type", absl::StrCat("expected a string (", kTypes, "), got ", typed(*type)));
  }
  const std::string name = lower(type->get<std::string>());
  if (name == "adam" || name == "adamw") {
    o->params = AdamWParams{};
  } else if (name == "lion") {
    o->params = LionParams{};
  } else if (name == "adagrad") {
    o->params = AdagradParams{};
    o->lr = 1e-2;  // torch.optim.Adagrad's and DeepSpeedCPUAdagrad's defaults
  } else if (name == "muon") {
    o->params = MuonParams{};
    o->lr = -1;  // given or not: ParamsReader resolves each half's
  } else {
    return absl::UnimplementedError(absl::StrCat(src, ": optimizer.type: ", show(*type),
                                                 " is not implemented in this build; supported "
                                                 "types: ",
                                                 kTypes, " (case-insensitive)"));
  }
  ZT_ASSIGN_OR_RETURN(const json* params, section(r, {"params"}));
  r.unsupported("legacy_fusion", false);
  ZT_RETURN_IF_ERROR(r.finish());
  if (params) {
    ZT_ASSIGN_OR_RETURN(ObjectReader p, ObjectReader::make(&src, *params, "optimizer.params"));
    ZT_RETURN_IF_ERROR(p.get_double({"lr"}, &o->lr, 0.0));
    ZT_RETURN_IF_ERROR(std::visit(ParamsReader{src, p, o, name == "adamw"}, o->params));
    p.unsupported("fp32_optimizer_states", true);
    ZT_RETURN_IF_ERROR(p.finish());
  }
  if (o->kind() == OptimizerKind::kMuon) {  // a half given no lr: MuonWithAuxAdam's default
    if (o->lr < 0) o->lr = 0.02;
    if (o->adam_lr < 0) o->adam_lr = 3e-4;
  }
  return absl::OkStatus();
}

// ----- scheduler ------------------------------------------------------------------------

absl::Status parse_scheduler(const std::string& src, const json& v, SchedulerConfig* s) {
  ZT_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::make(&src, v, "scheduler"));
  ZT_ASSIGN_OR_RETURN(const json* type, r.raw({"type"}));
  const std::vector<std::string> implemented = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  if (!type)
    return r.error("type",
                   "missing; give one of WarmupLR, WarmupDecayLR, "
                   "WarmupCosineLR");
  if (!type->is_string()) {
    return r.error("type", absl::StrCat("expected a string, got ", typed(*type)));
  }
  std::string name = type->get<std::string>();
  if (name == "WarmupLR") {
    s->type = SchedulerType::kWarmupLR;
  } else if (name == "WarmupDecayLR") {
    s->type = SchedulerType::kWarmupDecayLR;
  } else if (name == "WarmupCosineLR") {
    s->type = SchedulerType::kWarmupCosineLR;
  } else if (name == "OneCycle" || name == "LRRangeTest") {
    return absl::UnimplementedError(absl::StrCat(src, ": scheduler.type: \"", name,
                                                 "\" is not implemented in this build; supported: "
                                                 "WarmupLR, WarmupDecayLR, WarmupCosineLR"));
  } else {
    std::vector<std::string> all = implemented;
    all.push_back("OneCycle");
    all.push_back("LRRangeTest");
    std::string guess = closest(name, all);
    return r.error("type",
                   absl::StrCat("unknown scheduler \"", name, "\"",
                                guess.empty() ? "" : absl::StrCat("; did you mean '", guess, "'?"),
                                " (supported: WarmupLR, WarmupDecayLR, "
                                "WarmupCosineLR)"));
  }
  ZT_ASSIGN_OR_RETURN(const json* params, section(r, {"params"}));
  ZT_RETURN_IF_ERROR(r.finish());
  bool needs_total = s->type != SchedulerType::kWarmupLR;
  // DeepSpeed 0.19: WarmupDecayLR's own default warmup_max_lr is 0.001; WarmupLR's is None,
  // meaning the optimizer's lr.
  if (s->type == SchedulerType::kWarmupDecayLR) s->warmup_max_lr = 0.001;
  json empty = json::object();
  ZT_ASSIGN_OR_RETURN(ObjectReader p,
                      ObjectReader::make(&src, params ? *params : empty, "scheduler.params"));
  if (s->type == SchedulerType::kWarmupCosineLR) {
    ZT_RETURN_IF_ERROR(p.get_double({"warmup_min_ratio"}, &s->warmup_min_ratio, 0.0, false, 1.0));
    ZT_RETURN_IF_ERROR(p.get_double({"cos_min_ratio"}, &s->cos_min_ratio, 0.0, false, 1.0));
  } else {
    ZT_RETURN_IF_ERROR(p.get_double({"warmup_min_lr"}, &s->warmup_min_lr, 0.0));
    ZT_ASSIGN_OR_RETURN(std::optional<double> max_lr, p.get_opt_double({"warmup_max_lr"}, 0.0));
    if (max_lr) s->warmup_max_lr = max_lr;
  }
  ZT_RETURN_IF_ERROR(p.get_int({"warmup_num_steps"}, &s->warmup_num_steps, 1));
  std::string wt = "log";
  ZT_RETURN_IF_ERROR(p.get_choice({"warmup_type"}, {"log", "linear"}, false, &wt));
  s->warmup_type = wt == "log" ? WarmupType::kLog : WarmupType::kLinear;
  if (needs_total) {
    ZT_ASSIGN_OR_RETURN(std::optional<int64_t> total, p.get_opt_int({"total_num_steps"}, 1));
    if (!total) {
      return p.error("total_num_steps", absl::StrCat("required by ", name,
                                                     "; give the number "
                                                     "of optimizer steps of the run"));
    }
    s->total_num_steps = *total;
  }
  p.unsupported("last_batch_iteration", -1);
  return p.finish();
}

}  // namespace ds

nlohmann::json numeric_ds_config(const DsConfig& ds) {
  const OptimizerConfig& o = ds.optimizer;
  const SchedulerConfig& s = ds.scheduler;
  nlohmann::json j;
  if (const auto* a = std::get_if<AdamWParams>(&o.params)) {
    j["optimizer"] = {{"type", a->adam_w_mode ? "AdamW" : "Adam with L2 weight decay"},
                      {"params",
                       {{"lr", o.lr},
                        {"betas", {a->beta1, a->beta2}},
                        {"eps", a->eps},
                        {"weight_decay", a->weight_decay},
                        {"bias_correction", a->bias_correction}}}};
  } else if (const auto* l = std::get_if<LionParams>(&o.params)) {
    j["optimizer"] = {
        {"type", "Lion"},
        {"params",
         {{"lr", o.lr}, {"betas", {l->beta1, l->beta2}}, {"weight_decay", l->weight_decay}}}};
  } else if (const auto* g = std::get_if<AdagradParams>(&o.params)) {
    j["optimizer"] = {{"type", "Adagrad"},
                      {"params",
                       {{"lr", o.lr},
                        {"eps", g->eps},
                        {"weight_decay", g->weight_decay},
                        {"lr_decay", g->lr_decay}}}};
  } else if (const auto* m = std::get_if<MuonParams>(&o.params)) {
    j["optimizer"] = {{"type", "Muon"},
                      {"params",
                       {{"muon_lr", o.lr},
                        {"adam_lr", o.adam_lr},
                        {"momentum", m->momentum},
                        {"betas", {m->adam.beta1, m->adam.beta2}},
                        {"eps", m->adam.eps},
                        {"weight_decay", m->adam.weight_decay},
                        {"adam_w_mode", m->adam.adam_w_mode}}}};
  }
  const char* type = s.type == SchedulerType::kWarmupLR         ? "WarmupLR"
                     : s.type == SchedulerType::kWarmupDecayLR  ? "WarmupDecayLR"
                     : s.type == SchedulerType::kWarmupCosineLR ? "WarmupCosineLR"
                                                                : "none";
  j["scheduler"] = {{"type", type}};
  if (s.type != SchedulerType::kNone)
    j["scheduler"]["params"] = {
        {"warmup_min_lr", s.warmup_min_lr},
        {"warmup_max_lr", s.warmup_max_lr.value_or(o.lr)},
        {"warmup_num_steps", s.warmup_num_steps},
        {"warmup_type", s.warmup_type == WarmupType::kLog ? "log" : "linear"},
        {"total_num_steps", s.total_num_steps},
        {"warmup_min_ratio", s.warmup_min_ratio},
        {"cos_min_ratio", s.cos_min_ratio}};
  j["gradient_clipping"] = ds.gradient_clipping;
  j["gradient_predivide_factor"] = ds.gradient_predivide_factor;
  j["bf16"] = {{"enabled", ds.bf16.enabled}};
  j["fp16"] = {{"enabled", ds.fp16.enabled}};
  if (ds.fp16.enabled) {
    const Fp16Config& f = ds.fp16;
    j["fp16"].update({{"loss_scale", f.loss_scale},
                      {"initial_scale_power", f.initial_scale_power},
                      {"loss_scale_window", f.loss_scale_window},
                      {"hysteresis", f.hysteresis},
                      {"consecutive_hysteresis", f.consecutive_hysteresis},
                      {"min_loss_scale", f.min_loss_scale}});
  }
  return j;
}

}  // namespace zt
