#include "trainer/recommend.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checked.h"
#include "common/file.h"
#include "common/memory.h"
#include "common/status.h"
#include "model/config.h"
#include "trainer/engine_options.h"
#include "trainer/hardware_probe.h"
#include "trainer/run_config.h"
#include "zero/estimator.h"

namespace zt {
namespace {

using nlohmann::json;

struct Candidate {
  json config;
  std::string layout;
  MemoryEstimate memory;
  StepTime time;
};

// The ds_configs recommend tries: stage x offload (optimizer none, cpu, nvme; parameters too at
// stage 3, with the optimizer offloaded) x micro-batch x activation checkpointing x the delayed
// update (with an offloaded optimizer), bf16 AdamW, gradient accumulation 1.
std::vector<std::pair<json, std::string>> candidates(const std::string& nvme_path) {
  std::vector<std::pair<json, std::string>> out;
  for (int stage = 0; stage <= 3; ++stage)
    for (const char* opt : {"none", "cpu", "nvme"})
      for (const char* par : {"none", "cpu", "nvme"}) {
        const bool opt_off = std::string(opt) != "none", par_off = std::string(par) != "none";
        if ((stage == 0 && opt_off) || (par_off && (stage != 3 || !opt_off))) continue;
        for (int b : {1, 2, 4, 8, 16, 32})
          for (bool ckpt : {false, true})
            for (bool dpu : {false, true}) {
              if (dpu && !opt_off) continue;
              json zero = {{"stage", stage}};
              auto device = [&](const char* d) {
                json j = {{"device", d}, {"pin_memory", true}};
                if (std::string(d) == "nvme") j["nvme_path"] = nvme_path;
                return j;
              };
              if (opt_off) zero["offload_optimizer"] = device(opt);
              if (par_off) zero["offload_param"] = device(par);
              json c = {{"train_micro_batch_size_per_gpu", b},
                        {"gradient_accumulation_steps", 1},
                        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-4}}}}},
                        {"bf16", {{"enabled", true}}},
                        {"zero_optimization", zero}};
              json zt;
              if (ckpt) {
                c["activation_checkpointing"] = {{"partition_activations", false}};
                zt["gradient_checkpointing"] = true;
              }
              if (dpu) zt["delayed_param_update"] = {{"enabled", true}, {"warmup_steps", 10}};
              if (!zt.empty()) c["zerotrain"] = zt;
              std::string layout = absl::StrCat("stage ", stage);
              if (opt_off) absl::StrAppend(&layout, ", optimizer ", opt);
              if (par_off) absl::StrAppend(&layout, ", params ", par);
              absl::StrAppend(&layout, ", micro-batch ", b);
              if (ckpt) absl::StrAppend(&layout, ", checkpointing");
              if (dpu) absl::StrAppend(&layout, ", delayed update");
              out.emplace_back(std::move(c), std::move(layout));
            }
      }
  return out;
}

}  // namespace

absl::StatusOr<std::string> recommend_text(const EstimateOptions& o) {
  if (o.model.empty() || o.seq_len <= 0 || o.device_memory <= 0 || o.host_memory <= 0)
    return absl::InvalidArgumentError(
        "estimate --recommend needs --model, --seq_len T, --device_memory and --host_memory "
        "(e.g. 8GiB, 16GiB)");
  const int dp = o.dp > 0 ? o.dp : o.gpus_per_node * o.nodes;
  ZT_ASSIGN_OR_RETURN(const ModelConfig model, preset(o.model));
  std::string source;
  ZT_ASSIGN_OR_RETURN(const Hardware hw, hardware_named(o.hardware, o.nvme_path, &source));
  // On the CPU backend the device pool is host memory as well: both must fit the RAM together,
  // with a tenth left to the system and the process's other memory.
  const int64_t ram = hw.cpu_backend ? physical_memory_bytes() / 10 * 9 : 0;
  const std::string nvme = o.nvme_path.empty() ? "/tmp" : o.nvme_path;
  std::vector<Candidate> fit;
  int tried = 0;
  for (auto& [config, layout] : candidates(nvme)) {
    ++tried;
    auto ds = resolve_run_config(config.dump(), dp, "recommend", {});
    if (!ds.ok()) return ds.status();  // our own candidates: a bug, said plainly
    EstimateInput in =
        estimate_input(*ds, model, dp, dp, (int)ds->batch.train_micro_batch_size_per_gpu,
                       o.seq_len);  // one node
    if (!hw.cpu_backend) use_gpu_activations(in);
    in.device_host_addressable = hw.cpu_backend;  // the CPU backend's device memory is the host's
    auto e = estimate_memory(in);
    if (!e.ok()) continue;
    if (e->device_total() > o.device_memory || e->host_total() > o.host_memory) continue;
    if (ram > 0 && (Size(e->device_total()) + e->host_total()) * dp > ram) continue;  // the node's
    ZT_ASSIGN_OR_RETURN(const StepTime t,
                        predict_step(step_time_input(*ds, model, dp, o.seq_len), hw));
    fit.push_back({config, layout, *e, t});
  }
  const std::string limits = absl::StrCat(format_bytes(o.device_memory), " of device memory and ",
                                          format_bytes(o.host_memory), " of host memory a rank");
  if (fit.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "nothing fits ", o.model, " at T = ", o.seq_len, " on ", dp, " rank(s) with ", limits,
        ": none of ", tried,
        " layouts (stages 0-3, optimizer and parameter offload to cpu and "
        "nvme, micro-batch 1-32, activation checkpointing) does; more ranks (--dp), more host "
        "memory or a shorter --seq_len may"));
  // Fastest first; at equal speed (within 0.5%) the one that needs less memory, and one
  // without the delayed update (which changes what a step trains on: one step stale).
  auto delayed = [](const Candidate& c) {
    return c.config.contains("zerotrain") && c.config["zerotrain"].contains("delayed_param_update");
  };
  std::stable_sort(fit.begin(), fit.end(), [&](const Candidate& a, const Candidate& b) {
    if (std::abs(a.time.tokens_per_s - b.time.tokens_per_s) >
        0.005 * std::max(a.time.tokens_per_s, b.time.tokens_per_s))
      return a.time.tokens_per_s > b.time.tokens_per_s;
    if (delayed(a) != delayed(b)) return !delayed(a);
    return a.memory.device_total() + a.memory.host_total() <
           b.memory.device_total() + b.memory.host_total();
  });
  std::string out = absl::StrFormat(
      "Best of %d layouts that fit %s at T = %d on %d rank(s) with %s (of %d tried), by "
      "predicted tokens/s on hardware %s (%s)%s:\n\n",
      (int)fit.size(), o.model, o.seq_len, dp, limits, tried, hw.name, source,
      ram > 0 ? absl::StrCat("; the CPU backend's device pool and host memory of all ranks "
                             "together within ",
                             format_bytes(ram), " (90% of the node's RAM)")
              : "");
  for (size_t k = 0; k < std::min<size_t>(3, fit.size()); ++k) {
    const Candidate& c = fit[k];
    absl::StrAppend(
        &out, absl::StrFormat("%d. %s\n   device %s, host %s%s; step %.*f ms, %.0f tokens/s, MFU "
                              "%.1f%%\n",
                              (int)k + 1, c.layout, format_bytes(c.memory.device_total()),
                              format_bytes(c.memory.host_total()),
                              c.memory.nvme() > 0 ? ", nvme " + format_bytes(c.memory.nvme()) : "",
                              c.time.step < 0.01 ? 3 : 0, c.time.step * 1e3, c.time.tokens_per_s,
                              100 * c.time.mfu));
  }
  if (delayed(fit[0]))
    absl::StrAppend(&out,
                    "\nNote: the first uses ZeRO-Offload's delayed parameter update: each "
                    "step's update lands one step late (after warmup_steps ordinary "
                    "steps); drop the zerotrain block for the exact optimizer.\n");
  if (!o.write.empty()) {
    ZT_RETURN_IF_ERROR(write_file_atomic(o.write, fit[0].config.dump(2) + "\n"));
    absl::StrAppend(&out, "\nwrote the first as ", o.write, "\n");
  }
  return out;
}

}  // namespace zt
