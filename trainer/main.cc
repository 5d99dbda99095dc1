// zerotrain: subcommands `info`, `prepare`, `train`, `estimate`. Flags live here (absl);
// library code takes option structs. Every error a user can cause prints "error: ..." and
// exits with code 2.
#include <cstdio>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "data/prepare.h"
#include "model/config.h"
#include "model/layout.h"
#include "trainer/estimate.h"
#include "trainer/train.h"

// info
ABSL_FLAG(std::string, model, "shakespeare-llama", "model preset (see `zerotrain info`)");
// prepare
ABSL_FLAG(std::string, tokenizer, "", "sentencepiece tokenizer .model");
ABSL_FLAG(std::string, input, "", "prepare: text file(s), comma-separated");
ABSL_FLAG(std::string, out, "", "prepare: output directory for token shards");
ABSL_FLAG(double, val_fraction, 0.1, "prepare: share of tokens (from the end) for validation");
// train
ABSL_FLAG(std::string, deepspeed, "", "train: DeepSpeed ds_config.json");
ABSL_FLAG(std::string, init_from, "", "train: Hugging Face model directory to start from");
ABSL_FLAG(std::string, train_data, "", "train: glob of training token shards");
ABSL_FLAG(std::string, val_data, "", "train: glob of validation token shards");
ABSL_FLAG(std::string, run_dir, "runs/latest", "train: directory for metrics.jsonl");
ABSL_FLAG(int, seq_len, 256, "train: sequence length T");
ABSL_FLAG(int64_t, steps, 100, "train: optimizer steps");
ABSL_FLAG(int, val_every, 50, "train: steps between validations (0: start and end only)");
ABSL_FLAG(int, val_batches, 20, "train: micro-batches per validation");
ABSL_FLAG(int, sample_tokens, 128, "train: tokens to sample at the end (0: none)");
ABSL_FLAG(std::string, sample_prompt, "", "train: text the sample continues");
ABSL_FLAG(float, temperature, 0.8f, "train: sampling temperature (0: greedy)");
ABSL_FLAG(int, top_k, 50, "train: sample from the k most likely tokens (0: all)");
ABSL_FLAG(uint64_t, seed, 1337, "train: seed for initialisation, data order and sampling");
ABSL_FLAG(bool, shuffle, true, "train: shuffle the training data each epoch");
// estimate (also --model, --seq_len)
ABSL_FLAG(std::string, table, "", "estimate: 'zero-paper' prints Table 1 and Figure 1 of the ZeRO paper");
ABSL_FLAG(std::string, formula, "", "estimate: 'deepspeed' prints DeepSpeed's estimator formulas");
ABSL_FLAG(int64_t, params, 0, "estimate: parameter count Psi (instead of --model)");
ABSL_FLAG(int64_t, largest_layer_params, 0, "estimate: DeepSpeed ZeRO-3 largest layer (with --params)");
ABSL_FLAG(int, stage, -1, "estimate: ZeRO stage 0-3 (-1: every stage)");
ABSL_FLAG(int, dp, 0, "estimate: data-parallel degree N_d (0: gpus_per_node x nodes)");
ABSL_FLAG(int, gpus_per_node, 1, "estimate: GPUs per node");
ABSL_FLAG(int, nodes, 1, "estimate: nodes");
ABSL_FLAG(std::string, param_dtype, "bf16", "estimate: working parameter dtype (fp32, bf16, fp16)");
ABSL_FLAG(std::string, grad_dtype, "bf16", "estimate: gradient dtype (fp32, bf16, fp16)");
ABSL_FLAG(std::string, offload_optimizer, "none", "estimate: none, cpu or nvme");
ABSL_FLAG(std::string, offload_param, "none", "estimate: none, cpu or nvme (stage 3)");
ABSL_FLAG(int, micro_batch, 0, "estimate: micro-batch size B for activations (with --model, --seq_len)");
ABSL_FLAG(int, threads, 0, "OpenMP threads (0: all cores of this node / ranks on it)");

namespace {

constexpr const char* kUsage =
    "zerotrain <command> [flags]\n"
    "  info     --model PRESET                       parameter counts per unit\n"
    "  prepare  --tokenizer M --input F[,F] --out D  text -> llm.c token shards\n"
    "  train    --deepspeed ds_config.json --train_data GLOB [...]\n"
    "  estimate --model PRESET | --params N [--stage S --dp N_d --offload_optimizer cpu ...]\n"
    "           --table zero-paper | --formula deepspeed [--gpus_per_node G --nodes n]\n"
    "Flags may be spelled with '-' or '_' (--val-fraction = --val_fraction); recipes can be\n"
    "passed with --flagfile. `zerotrain --helpfull` lists every flag.";

int fail(const absl::Status& s) {
  std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
  return zt::kUserErrorExitCode;
}

int info() {
  auto c = zt::preset(absl::GetFlag(FLAGS_model));
  if (!c.ok()) return fail(c.status());
  const zt::ParamLayout layout(*c);
  std::printf("%-12s %15s\n", "unit", "parameters");
  for (const zt::Unit& u : layout.units()) std::printf("%-12s %15zu\n", u.name.c_str(), u.numel);
  std::printf("%-12s %15zu\n", "total", layout.total_numel());
  return 0;
}

int prepare() {
  zt::PrepareOptions o;
  o.tokenizer_path = absl::GetFlag(FLAGS_tokenizer);
  for (auto& s : absl::StrSplit(absl::GetFlag(FLAGS_input), ',', absl::SkipEmpty()))
    o.inputs.emplace_back(s);
  o.out_dir = absl::GetFlag(FLAGS_out);
  o.val_fraction = absl::GetFlag(FLAGS_val_fraction);
  if (o.tokenizer_path.empty() || o.inputs.empty() || o.out_dir.empty())
    return fail(absl::InvalidArgumentError(
        "prepare needs --tokenizer MODEL --input FILE[,FILE] --out DIR"));
  const absl::Status s = zt::prepare_text(o);
  return s.ok() ? 0 : fail(s);
}

int train() {
  zt::TrainOptions o;
  o.model = absl::GetFlag(FLAGS_model);
  o.init_from = absl::GetFlag(FLAGS_init_from);
  o.deepspeed = absl::GetFlag(FLAGS_deepspeed);
  o.train_data = absl::GetFlag(FLAGS_train_data);
  o.val_data = absl::GetFlag(FLAGS_val_data);
  o.tokenizer = absl::GetFlag(FLAGS_tokenizer);
  o.run_dir = absl::GetFlag(FLAGS_run_dir);
  o.seq_len = absl::GetFlag(FLAGS_seq_len);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.val_every = absl::GetFlag(FLAGS_val_every);
  o.val_batches = absl::GetFlag(FLAGS_val_batches);
  o.sample_tokens = absl::GetFlag(FLAGS_sample_tokens);
  o.sample_prompt = absl::GetFlag(FLAGS_sample_prompt);
  o.temperature = absl::GetFlag(FLAGS_temperature);
  o.top_k = absl::GetFlag(FLAGS_top_k);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.shuffle = absl::GetFlag(FLAGS_shuffle);
  o.threads = absl::GetFlag(FLAGS_threads);
  const absl::Status s = zt::run_train(o);
  return s.ok() ? 0 : fail(s);
}

// `model_given`: --model appeared on the command line (its default names a demo preset).
int estimate(bool model_given) {
  zt::EstimateOptions o;
  o.table = absl::GetFlag(FLAGS_table);
  o.formula = absl::GetFlag(FLAGS_formula);
  o.params = absl::GetFlag(FLAGS_params);
  if (model_given || o.params <= 0) o.model = absl::GetFlag(FLAGS_model);
  o.largest_layer_params = absl::GetFlag(FLAGS_largest_layer_params);
  o.stage = absl::GetFlag(FLAGS_stage);
  o.dp = absl::GetFlag(FLAGS_dp);
  o.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  o.nodes = absl::GetFlag(FLAGS_nodes);
  o.param_dtype = absl::GetFlag(FLAGS_param_dtype);
  o.grad_dtype = absl::GetFlag(FLAGS_grad_dtype);
  o.offload_optimizer = absl::GetFlag(FLAGS_offload_optimizer);
  o.offload_param = absl::GetFlag(FLAGS_offload_param);
  o.micro_batch = absl::GetFlag(FLAGS_micro_batch);
  if (o.micro_batch > 0) o.seq_len = absl::GetFlag(FLAGS_seq_len);
  const absl::Status s = zt::run_estimate(o);
  return s.ok() ? 0 : fail(s);
}

// Checks every --name[=value] against the registered flags before absl parses them, so that an
// unknown flag or a bad value exits with code 2 and names the closest flag (absl would exit 1).
absl::Status check_flags(const std::vector<std::string>& args) {
  const auto all = absl::GetAllFlags();
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) continue;
    const size_t eq = a.find('=');
    std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (name == "flagfile" || name == "help" || name == "helpfull" || name == "helpshort" ||
        name == "version" || name == "undefok" || name == "fromenv" || name == "tryfromenv") {
      if (eq == std::string::npos && name == "flagfile") ++i;
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (!flag && name.starts_with("no")) {  // --noshuffle
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag && flag->IsOfType<bool>() && eq == std::string::npos) continue;
      flag = nullptr;
    }
    if (!flag) {
      std::string best;
      size_t best_d = SIZE_MAX;
      for (const auto& [n, f] : all) {
        if (f->Filename().find("zerotrain") == std::string::npos &&
            f->Filename().find("trainer/main.cc") == std::string::npos)
          continue;
        // Levenshtein distance, two rows.
        std::vector<size_t> prev(n.size() + 1), cur(n.size() + 1);
        for (size_t j = 0; j <= n.size(); ++j) prev[j] = j;
        for (size_t k = 1; k <= name.size(); ++k) {
          cur[0] = k;
          for (size_t j = 1; j <= n.size(); ++j)
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1,
                               prev[j - 1] + (name[k - 1] != n[j - 1])});
          std::swap(prev, cur);
        }
        if (prev[n.size()] < best_d) best_d = prev[n.size()], best = std::string(n);
      }
      return absl::InvalidArgumentError("unknown flag --" + name + "; did you mean --" + best +
                                        "? (`zerotrain --helpfull` lists every flag)");
    }
    std::string value;
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError("flag --" + name + " needs a value");
    }
    std::string err;
    const std::string saved = flag->CurrentValue();
    if (!flag->ParseFrom(value, &err))
      return absl::InvalidArgumentError("bad value '" + value + "' for --" + name + ": " + err);
    flag->ParseFrom(saved, &err);
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  // Accept --val-fraction for --val_fraction: rewrite the name part of every "--flag[=v]".
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) continue;
    const size_t end = std::min(a.find('='), a.size());
    for (size_t k = 2; k < end; ++k)
      if (a[k] == '-') a[k] = '_';
  }
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  absl::SetProgramUsageMessage(kUsage);
  if (const absl::Status s = check_flags(args); !s.ok()) return fail(s);
  std::vector<char*> pos = absl::ParseCommandLine(static_cast<int>(cargv.size()), cargv.data());
  if (pos.size() < 2) {
    std::fprintf(stderr, "%s\n", kUsage);
    return zt::kUserErrorExitCode;
  }
  const std::string cmd = pos[1];
  if (pos.size() > 2)
    return fail(absl::InvalidArgumentError(
        std::string("unexpected argument '") + pos[2] + "'; flags start with --"));
  if (cmd == "info") return info();
  if (cmd == "prepare") return prepare();
  if (cmd == "train") return train();
  if (cmd == "estimate") {
    const bool model_given = std::any_of(args.begin(), args.end(), [](const std::string& a) {
      return a == "--model" || a.rfind("--model=", 0) == 0;
    });
    return estimate(model_given);
  }
  return fail(absl::InvalidArgumentError("unknown command '" + cmd +
                                         "'; use info, prepare, train or estimate"));
}
