// zerotrain: subcommands `info`, `prepare`, `train`, `sample`, `estimate`, `export`. Flags and
// the environment are read here only (absl); library code takes option structs. Every error a
// user can cause prints "error: ..." and exits with code 2.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/edit_distance.h"
#include "common/file.h"
#include "common/memory.h"
#include "common/progress.h"
#include "common/status.h"
#include "data/alpaca.h"
#include "data/prepare.h"
#include "model/config.h"
#include "model/layout.h"
#include "trainer/compare.h"
#include "trainer/ds_config.h"
#include "trainer/estimate.h"
#include "trainer/export.h"
#include "trainer/sampler.h"
#include "trainer/train.h"
#include "trainer/version.h"
#include "zero/mpi_comm.h"

// info
ABSL_FLAG(std::string, model, "shakespeare-llama", "model preset (see `zerotrain info`)");
// prepare
ABSL_FLAG(std::string, tokenizer, "",
          "sentencepiece .model, or a Hugging Face tokenizer.json (decodes only), or the model "
          "directory holding one");
ABSL_FLAG(std::string, input, "", "prepare: text file(s), comma-separated");
ABSL_FLAG(std::string, out, "",
          "prepare: output directory for token shards; export: the model directory to write");
ABSL_FLAG(std::string, checkpoint, "",
          "export, sample: a zerotrain checkpoint, or a save_dir (its latest)");
ABSL_FLAG(std::string, dtype, "bf16", "export: dtype of the weights (bf16, fp16, fp32)");
ABSL_FLAG(std::string, max_shard_size, "2GB", "export: bytes per safetensors shard, e.g. 2GB");
ABSL_FLAG(double, val_fraction, 0.1, "prepare: share of tokens (from the end) for validation");
ABSL_FLAG(std::string, format, "text",
          "prepare: text (plain text files) or alpaca (instruction JSON: a loss mask trains only "
          "the responses, one example per --seq_len row, or several with --pack; data/alpaca.h)");
ABSL_FLAG(bool, quiet, false,
          "no progress lines for long phases (loading weights, tokenizing, saving, resuming, "
          "exporting; otherwise a bar on a terminal, a line every 5 s in a log)");
ABSL_FLAG(bool, markdown, false, "compare: a Markdown table (for docs/)");
ABSL_FLAG(bool, allow_different, false,
          "compare: compare runs whose model or training data differ");
ABSL_FLAG(bool, pack, false,
          "prepare: pack several whole examples (alpaca) or documents (text) into each "
          "--seq_len row, each attending only to itself with positions restarting, instead of "
          "one padded example a row (alpaca) or one stream (text)");
ABSL_FLAG(std::string, overlong, "skip",
          "prepare --format alpaca: an example longer than --seq_len is skipped, truncated (to its "
          "first T tokens) or split (into pieces of T; data/alpaca.h)");
ABSL_FLAG(std::string, template, "",
          "prepare --format alpaca: a prompt template JSON (default Alpaca's); sample: alpaca, "
          "or such a file, to wrap --sample_prompt as an instruction");
// train
ABSL_FLAG(std::string, deepspeed, "", "train: DeepSpeed ds_config.json");
ABSL_FLAG(std::string, init_from, "", "train: Hugging Face model directory to start from");
ABSL_FLAG(std::string, train_data, "", "train: glob of training token shards");
ABSL_FLAG(std::string, val_data, "", "train: glob of validation token shards");
ABSL_FLAG(std::string, run_dir, "runs/latest", "train: directory for metrics.jsonl");
ABSL_FLAG(int, seq_len, 256, "train: sequence length T; sample: the KV-cache window");
ABSL_FLAG(int64_t, max_seq_len, 0,
          "train, sample: the model's context length (0: its own; RoPE models any length, GPT-2 "
          "only shorter)");
ABSL_FLAG(int64_t, steps, 100, "train: optimizer steps");
ABSL_FLAG(int, val_every, 50, "train: steps between validations (0: start and end only)");
ABSL_FLAG(int64_t, val_sequences, 128,
          "train: the validation set, as the first sequences (of --seq_len + 1 tokens) of "
          "--val_data; the same on any micro-batch and ranks");
ABSL_FLAG(int, val_batches, 0, "retired: use --val_sequences");
ABSL_FLAG(int, sample_tokens, 128,
          "train: tokens to sample at the end (0: none); sample: tokens to generate");
ABSL_FLAG(std::string, sample_prompt, "", "train, sample: text the sample continues");
ABSL_FLAG(float, temperature, 0.8f, "train, sample: sampling temperature (0: greedy)");
ABSL_FLAG(int, top_k, 50, "train, sample: sample from the k most likely tokens (0: all)");
ABSL_FLAG(float, top_p, 1.f,
          "train, sample: then from the most likely tokens up to this probability (1: off)");
ABSL_FLAG(std::string, prompt, "", "sample: the same as --sample_prompt");
ABSL_FLAG(int, max_new_tokens, 128, "sample: the same as --sample_tokens");
ABSL_FLAG(uint64_t, seed, 1337,
          "train, sample: seed for initialisation, data order and sampling");
ABSL_FLAG(bool, shuffle, true, "train: shuffle the training data each epoch");
// estimate (also --model, --seq_len)
ABSL_FLAG(std::string, table, "",
          "estimate: 'zero-paper' (ZeRO Table 1, Figure 1), 'zero-offload', 'zero-infinity'");
ABSL_FLAG(std::string, formula, "", "estimate: 'deepspeed' prints DeepSpeed's estimator formulas");
ABSL_FLAG(bool, time, false,
          "estimate: the step-time model for --deepspeed's run (compute, communication, "
          "offload copies, optimizer, NVMe; overlaps, tokens/s, MFU)");
ABSL_FLAG(std::string, hardware, "this",
          "estimate --time: h100, h200, a100-80gb, a100-40gb, v100-32gb, rtx3070, rtx4090, cpu, "
          "or this (measured here and cached; this-refresh measures again)");
ABSL_FLAG(std::string, nvme_path, "", "estimate --time --hardware this: where to time the drive");
ABSL_FLAG(double, inter_node_gbps, 0,
          "estimate --time over several --nodes: Gbit/s a rank between nodes (0: 400, a GPU's "
          "InfiniBand NIC)");
ABSL_FLAG(bool, recommend, false,
          "estimate: the best layouts for --model at --seq_len within --device_memory and "
          "--host_memory, ranked by predicted tokens/s (--hardware)");
ABSL_FLAG(std::string, write, "", "estimate --recommend: write the best as this ds_config");
ABSL_FLAG(int64_t, params, 0, "estimate: parameter count Psi (instead of --model)");
ABSL_FLAG(int64_t, largest_layer_params, 0,
          "estimate: DeepSpeed ZeRO-3 largest layer (with --params)");
ABSL_FLAG(int, stage, -1, "estimate: ZeRO stage 0-3 (-1: every stage)");
ABSL_FLAG(int, dp, 0, "estimate: data-parallel degree N_d (0: gpus_per_node x nodes)");
ABSL_FLAG(int, world_size, 0, "estimate: ranks N_d (the same as --dp)");
ABSL_FLAG(std::string, device_memory, "",
          "estimate: device memory per rank, e.g. 8GiB: say whether the estimate fits");
ABSL_FLAG(std::string, host_memory, "",
          "estimate: host memory per rank, e.g. 32GiB: say whether the estimate fits");
ABSL_FLAG(int, gpus_per_node, 1, "estimate: GPUs per node");
ABSL_FLAG(int, nodes, 1, "estimate: nodes");
ABSL_FLAG(std::string, param_dtype, "bf16", "estimate: working parameter dtype (fp32, bf16, fp16)");
ABSL_FLAG(std::string, grad_dtype, "bf16", "estimate: gradient dtype (fp32, bf16, fp16)");
ABSL_FLAG(std::string, offload_optimizer, "none", "estimate: none, cpu or nvme");
ABSL_FLAG(std::string, offload_param, "none", "estimate: none, cpu or nvme (stage 3)");
ABSL_FLAG(int, micro_batch, 0,
          "estimate: micro-batch size B for activations (with --model, --seq_len)");
ABSL_FLAG(bool, memory_report, false,
          "train: write memory_report_rank<r>.json (measured bytes per category vs the formula)");
ABSL_FLAG(bool, comm_report, false,
          "train: write comm_report_rank<r>.json (collectives per step, volume in units of Psi)");
ABSL_FLAG(int, threads, 0,
          "OpenMP threads of the model's kernels (0: the cores of this node / ranks on it, "
          "halved with --optimizer_threads on the CPU backend when the optimizer is offloaded)");
ABSL_FLAG(int, optimizer_threads, 0,
          "train: OpenMP threads of the offloaded optimizer's update off the training thread "
          "(0: default zerotrain.optimizer_threads, else chosen: docs/offload.md \"Threads\")");
ABSL_FLAG(std::string, save_dir, "",
          "train: directory for checkpoints (also zerotrain.save_dir; docs/checkpoints.md)");
ABSL_FLAG(int64_t, save_interval, -1,
          "train: steps between checkpoints (0: at the end only; default zerotrain.save_interval, "
          "else 0)");
ABSL_FLAG(int64_t, keep_last, -1,
          "train: checkpoints kept, newest first (0: all; default zerotrain.keep_last, else 0)");
ABSL_FLAG(bool, resume, false, "train: continue from --save_dir's latest checkpoint, if any");
ABSL_FLAG(std::string, resume_from, "",
          "train: continue from this checkpoint directory (or a save_dir's latest)");
ABSL_FLAG(std::string, device, "auto",
          "train, sample: auto, cpu or cuda (auto: the node-local GPU when one is visible); "
          "estimate: cuda counts activations in the working dtype, as a GPU keeps them");
ABSL_FLAG(std::string, attention, "",
          "train: the GPU's attention: auto (cuDNN's where it loads, else flash), flash (our "
          "tensor-core kernels) or cudnn (as the ds_config key zerotrain.attention; default auto)");
ABSL_FLAG(bool, gradient_checkpointing, false,
          "train, estimate: activation checkpointing, configured by the ds_config's "
          "activation_checkpointing section (as zerotrain.gradient_checkpointing)");
ABSL_FLAG(std::string, trace_steps, "",
          "train: FIRST,LAST: a Chrome trace of those steps (trace_rank<r>.json in the run "
          "directory, or zerotrain.trace.output_path) and their exposed communication, copy and "
          "optimizer time; also zerotrain.trace");
ABSL_FLAG(std::string, device_memory_limit, "",
          "train: cap on device memory, e.g. 8GiB (as the ds_config key "
          "zerotrain.device_memory_limit; give one or both equal)");
ABSL_FLAG(std::string, host_memory_limit, "",
          "train: cap on this rank's host memory for model states and offload buffers, e.g. "
          "16GiB (as zerotrain.host_memory_limit; give one or both equal)");

namespace {

constexpr const char* kUsage =
    "zerotrain <command> [flags]\n"
    "  info     --model PRESET                       parameter counts per unit\n"
    "  prepare  --tokenizer M --input F[,F] --out D  text -> llm.c token shards\n"
    "           [--format alpaca --seq_len T --pack]  instructions, packed rows\n"
    "  train    --deepspeed ds_config.json --train_data GLOB [...]\n"
    "  sample   --init_from HF_DIR | --checkpoint DIR | --model PRESET, --tokenizer M\n"
    "           [--prompt TEXT --template alpaca --max_new_tokens N ...]\n"
    "  export   --checkpoint DIR --out HF_DIR [--dtype bf16|fp16|fp32] [--tokenizer M]\n"
    "  compare  RUN_DIR... [--markdown] [--allow_different]\n"
    "                                                runs side by side (memory, speed, loss)\n"
    "  estimate --model PRESET | --params N [--stage S --dp N_d --offload_optimizer cpu ...]\n"
    "           [--micro_batch B --seq_len T --device cuda (a GPU's 16-bit activations, no fp32\n"
    "            view of 16-bit weights)]\n"
    "           --table zero-paper|zero-offload|zero-infinity\n"
    "           --time --deepspeed ds.json --model M --seq_len T [--dp N --hardware H|this]\n"
    "           --recommend --model M --seq_len T --device_memory X --host_memory Y\n"
    "             [--dp N --hardware H|this --write ds.json]\n"
    "           --formula deepspeed [--gpus_per_node G --nodes n]\n"
    "Flags may be spelled with '-' or '_' (--val-fraction = --val_fraction); recipes can be\n"
    "passed with --flagfile (one --flag=value per line, # comments). `zerotrain --helpfull`\n"
    "lists every flag (docs/cli.md explains them); `zerotrain --version` names the build.";

int fail(const absl::Status& s) {
  std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
  return zt::kUserErrorExitCode;
}

absl::Status check_optimizer_threads(int n) {
  if (n >= 0 && n <= 1024) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--optimizer_threads: value ", n,
                   " is out of range; allowed: an integer from 0 (chosen from the cores) to 1024"));
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

// --pack lays examples into rows of --seq_len tokens: it needs the length said, and one a model
// can take (at most 2^20, as --max_seq_len).
absl::Status check_pack_seq_len(bool pack, bool given, int seq_len) {
  if (!pack) return absl::OkStatus();
  if (!given)
    return absl::InvalidArgumentError(
        "--pack needs --seq_len T, the row length the model will train at (e.g. 512)");
  if (seq_len > (1 << 20))
    return absl::InvalidArgumentError(absl::StrCat("--seq_len ", seq_len,
                                                   " is longer than any model takes (2^20 = "
                                                   "1048576); give the length you train at"));
  return absl::OkStatus();
}

int prepare(bool seq_len_given) {
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format == "alpaca") {
    zt::InstructionPrepareOptions a;
    a.tokenizer_path = absl::GetFlag(FLAGS_tokenizer);
    a.input = absl::GetFlag(FLAGS_input);
    a.out_dir = absl::GetFlag(FLAGS_out);
    a.template_path = absl::GetFlag(FLAGS_template);
    a.val_fraction = absl::GetFlag(FLAGS_val_fraction);
    a.seq_len = seq_len_given ? absl::GetFlag(FLAGS_seq_len) : 256;
    a.pack = absl::GetFlag(FLAGS_pack);
    if (const absl::Status s = check_pack_seq_len(a.pack, seq_len_given, a.seq_len); !s.ok())
      return fail(s);
    const auto overlong = zt::parse_overlong(absl::GetFlag(FLAGS_overlong));
    if (!overlong.ok()) return fail(overlong.status());
    a.overlong = *overlong;
    if (a.tokenizer_path.empty() || a.input.empty() || a.out_dir.empty())
      return fail(absl::InvalidArgumentError(
          "prepare --format alpaca needs --tokenizer MODEL --input FILE.json --out DIR "
          "[--seq_len T] [--pack] [--overlong skip|truncate|split]"));
    const auto report = zt::prepare_instructions(a);
    return report.ok() ? 0 : fail(report.status());
  }
  if (format != "text")
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--format '", format, "' is not one of text, alpaca")));
  zt::PrepareOptions o;
  o.tokenizer_path = absl::GetFlag(FLAGS_tokenizer);
  for (auto& s : absl::StrSplit(absl::GetFlag(FLAGS_input), ',', absl::SkipEmpty()))
    o.inputs.emplace_back(s);
  o.out_dir = absl::GetFlag(FLAGS_out);
  o.val_fraction = absl::GetFlag(FLAGS_val_fraction);
  o.pack = absl::GetFlag(FLAGS_pack);
  o.seq_len = seq_len_given ? absl::GetFlag(FLAGS_seq_len) : 256;
  if (seq_len_given && !o.pack)
    return fail(absl::InvalidArgumentError(
        "prepare reads --seq_len for plain text only with --pack (rows of T tokens); drop it, "
        "or add --pack"));
  if (const absl::Status s = check_pack_seq_len(o.pack, seq_len_given, o.seq_len); !s.ok())
    return fail(s);
  if (o.tokenizer_path.empty() || o.inputs.empty() || o.out_dir.empty())
    return fail(absl::InvalidArgumentError(
        "prepare needs --tokenizer MODEL --input FILE[,FILE] --out DIR"));
  const absl::Status s = zt::prepare_text(o);
  return s.ok() ? 0 : fail(s);
}

// `zerotrain sample`. given(flag): the flag was on the command line, read for --seq_len (else
// the window is 256, or the model's context when shorter: trainer/sampler.h) and for the
// aliases below.
int sample(const std::function<bool(const std::string&)>& given) {
  const bool seq_len_given = given("--seq_len");
  // --prompt and --max_new_tokens are aliases of --sample_prompt and --sample_tokens; both of a
  // pair given is an error unless they agree.
  std::string prompt = absl::GetFlag(FLAGS_sample_prompt);
  int tokens = absl::GetFlag(FLAGS_sample_tokens);
  if (given("--prompt")) {
    if (given("--sample_prompt") && prompt != absl::GetFlag(FLAGS_prompt))
      return fail(absl::InvalidArgumentError("--prompt and --sample_prompt disagree; give one"));
    prompt = absl::GetFlag(FLAGS_prompt);
  }
  if (given("--max_new_tokens")) {
    if (given("--sample_tokens") && tokens != absl::GetFlag(FLAGS_max_new_tokens))
      return fail(absl::InvalidArgumentError(
          "--max_new_tokens and --sample_tokens disagree; give one"));
    tokens = absl::GetFlag(FLAGS_max_new_tokens);
  }
  zt::SampleCommand c;
  c.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  c.window_given = seq_len_given;
  c.model = absl::GetFlag(FLAGS_model);
  c.init_from = absl::GetFlag(FLAGS_init_from);
  if ((!c.init_from.empty() || !absl::GetFlag(FLAGS_checkpoint).empty()) && !given("--model"))
    c.model.clear();
  c.tokenizer = absl::GetFlag(FLAGS_tokenizer);
  c.max_seq_len = absl::GetFlag(FLAGS_max_seq_len);
  c.threads = absl::GetFlag(FLAGS_threads);
  c.device = absl::GetFlag(FLAGS_device);
  c.prompt_template = absl::GetFlag(FLAGS_template);
  c.sample = {prompt,
              tokens,
              absl::GetFlag(FLAGS_temperature),
              absl::GetFlag(FLAGS_top_k),
              absl::GetFlag(FLAGS_seed),
              absl::GetFlag(FLAGS_seq_len),
              absl::GetFlag(FLAGS_top_p)};
  const absl::Status s = zt::run_sample(c);
  return s.ok() ? 0 : fail(s);
}

// given(flag): the flag was on the command line (--model beside --init_from is compared with it).
int train(const std::function<bool(const std::string&)>& given) {
  zt::TrainOptions o;
  o.model = absl::GetFlag(FLAGS_model);
  o.init_from = absl::GetFlag(FLAGS_init_from);
  if (!o.init_from.empty() && !given("--model")) o.model.clear();
  o.deepspeed = absl::GetFlag(FLAGS_deepspeed);
  o.train_data = absl::GetFlag(FLAGS_train_data);
  o.val_data = absl::GetFlag(FLAGS_val_data);
  o.tokenizer = absl::GetFlag(FLAGS_tokenizer);
  o.run_dir = absl::GetFlag(FLAGS_run_dir);
  o.seq_len = absl::GetFlag(FLAGS_seq_len);
  o.max_seq_len = absl::GetFlag(FLAGS_max_seq_len);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.val_every = absl::GetFlag(FLAGS_val_every);
  o.val_sequences = absl::GetFlag(FLAGS_val_sequences);
  if (given("--val_batches"))  // counted micro-batches per rank: a set that moved with the layout
    return fail(absl::InvalidArgumentError(
        "--val_batches is retired: it counted micro-batches per rank, so the validation set "
        "changed with the micro-batch and the ranks. Give --val_sequences N, the first N "
        "sequences of --val_data whatever the layout (the old --val_batches V took V * "
        "micro-batch * ranks)"));
  o.sample_tokens = absl::GetFlag(FLAGS_sample_tokens);
  o.sample_prompt = absl::GetFlag(FLAGS_sample_prompt);
  o.temperature = absl::GetFlag(FLAGS_temperature);
  o.top_k = absl::GetFlag(FLAGS_top_k);
  o.top_p = absl::GetFlag(FLAGS_top_p);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.shuffle = absl::GetFlag(FLAGS_shuffle);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.optimizer_threads = absl::GetFlag(FLAGS_optimizer_threads);
  if (absl::Status s = check_optimizer_threads(o.optimizer_threads); !s.ok()) return fail(s);
  o.device = absl::GetFlag(FLAGS_device);
  o.attention = absl::GetFlag(FLAGS_attention);
  o.save_dir = absl::GetFlag(FLAGS_save_dir);
  o.save_interval = absl::GetFlag(FLAGS_save_interval);
  o.keep_last = absl::GetFlag(FLAGS_keep_last);
  // -1 stands for "not given" (the zerotrain key then decides); a negative value given (on the
  // command line, or any but -1 in a flagfile) is refused as the key of the same name is.
  for (const auto& [flag, value] :
       {std::pair{"save_interval", o.save_interval}, std::pair{"keep_last", o.keep_last}})
    if (value < 0 && (value != -1 || given(absl::StrCat("--", flag))))
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": value ", value, " is out of range; allowed: an integer >= 0 (",
          std::string_view(flag) == "keep_last" ? "0: keep every save" : "0: save at the end only",
          "), as for zerotrain.", flag)));
  o.resume = absl::GetFlag(FLAGS_resume);
  o.resume_from = absl::GetFlag(FLAGS_resume_from);
  o.memory_report = absl::GetFlag(FLAGS_memory_report);
  o.comm_report = absl::GetFlag(FLAGS_comm_report);
  o.gradient_checkpointing = absl::GetFlag(FLAGS_gradient_checkpointing);
  for (auto [flag, name, out] :
       {std::tuple{&FLAGS_device_memory_limit, "--device_memory_limit", &o.device_memory_limit},
        std::tuple{&FLAGS_host_memory_limit, "--host_memory_limit", &o.host_memory_limit}})
    if (const std::string lim = absl::GetFlag(*flag); !lim.empty()) {
      auto bytes = zt::parse_byte_size(lim);
      if (!bytes.ok())
        return fail(zt::prefixed(bytes.status(), name));
      *out = *bytes;
    }
  if (const std::string steps = absl::GetFlag(FLAGS_trace_steps); !steps.empty()) {
    const std::vector<std::string> p = absl::StrSplit(steps, ',');
    if (p.size() != 2 || !absl::SimpleAtoi(p[0], &o.trace_first) ||
        !absl::SimpleAtoi(p[1], &o.trace_last) || o.trace_first < 1 || o.trace_last < o.trace_first)
      return fail(absl::InvalidArgumentError(
          absl::StrCat("--trace_steps '", steps,
                       "': give FIRST,LAST, whole steps with 1 <= FIRST <= LAST, e.g. 2,3")));
  }
  const char* ahead = std::getenv("ZEROTRAIN_PARAM_READ_AHEAD");
  o.param_read_ahead = !(ahead && std::string(ahead) == "0");
  const absl::Status s = zt::run_train(o);
  return s.ok() ? 0 : fail(s);
}

int export_checkpoint() {
  zt::ExportOptions o;
  o.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  o.out = absl::GetFlag(FLAGS_out);
  o.dtype = absl::GetFlag(FLAGS_dtype);
  o.tokenizer = absl::GetFlag(FLAGS_tokenizer);
  auto bytes = zt::parse_byte_size(absl::GetFlag(FLAGS_max_shard_size));
  if (!bytes.ok())
    return fail(zt::prefixed(bytes.status(), "--max_shard_size"));
  o.max_shard_bytes = *bytes;
  const absl::Status s = zt::run_export(o);
  return s.ok() ? 0 : fail(s);
}

// `model_given`: --model appeared on the command line (its default names a demo preset).
int estimate(bool model_given) {
  zt::EstimateOptions o;
  o.table = absl::GetFlag(FLAGS_table);
  o.formula = absl::GetFlag(FLAGS_formula);
  o.params = absl::GetFlag(FLAGS_params);
  o.largest_layer_params = absl::GetFlag(FLAGS_largest_layer_params);
  for (const auto& [flag, value] :
       {std::pair{"params", o.params}, std::pair{"largest_layer_params", o.largest_layer_params}})
    if (value < 0)
      return fail(absl::InvalidArgumentError(
          absl::StrCat("--", flag, " ", value, " must be >= 1 (0, the default: from --model)")));
  if (model_given || o.params <= 0) o.model = absl::GetFlag(FLAGS_model);
  o.stage = absl::GetFlag(FLAGS_stage);
  o.dp = absl::GetFlag(FLAGS_dp);
  o.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  o.nodes = absl::GetFlag(FLAGS_nodes);
  o.param_dtype = absl::GetFlag(FLAGS_param_dtype);
  o.grad_dtype = absl::GetFlag(FLAGS_grad_dtype);
  o.offload_optimizer = absl::GetFlag(FLAGS_offload_optimizer);
  o.offload_param = absl::GetFlag(FLAGS_offload_param);
  o.gradient_checkpointing = absl::GetFlag(FLAGS_gradient_checkpointing);
  o.device = absl::GetFlag(FLAGS_device);
  o.time = absl::GetFlag(FLAGS_time);
  o.hardware = absl::GetFlag(FLAGS_hardware);
  o.inter_node_gbps = absl::GetFlag(FLAGS_inter_node_gbps);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.optimizer_threads = absl::GetFlag(FLAGS_optimizer_threads);
  if (absl::Status s = check_optimizer_threads(o.optimizer_threads); !s.ok()) return fail(s);
  if (o.threads < 0)
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--threads: value ", o.threads, " must be 0 (all the rank's cores) or more")));
  o.nvme_path = absl::GetFlag(FLAGS_nvme_path);
  o.recommend = absl::GetFlag(FLAGS_recommend);
  o.write = absl::GetFlag(FLAGS_write);
  o.micro_batch = absl::GetFlag(FLAGS_micro_batch);
  o.deepspeed = absl::GetFlag(FLAGS_deepspeed);
  if (o.micro_batch > 0 || !o.deepspeed.empty() || o.recommend)
    o.seq_len = absl::GetFlag(FLAGS_seq_len);
  if (const int w = absl::GetFlag(FLAGS_world_size); w != 0) {
    if (o.dp != 0 && o.dp != w)
      return fail(absl::InvalidArgumentError("--world_size and --dp disagree; give one"));
    o.dp = w;
  }
  for (auto [flag, out] : {std::pair{absl::GetFlag(FLAGS_device_memory), &o.device_memory},
                           std::pair{absl::GetFlag(FLAGS_host_memory), &o.host_memory}}) {
    if (flag.empty()) continue;
    auto bytes = zt::parse_byte_size(flag);
    if (!bytes.ok()) return fail(bytes.status());
    *out = *bytes;
  }
  const absl::Status s = zt::run_estimate(o);
  return s.ok() ? 0 : fail(s);
}

// Rewrites the command line into one absl parses without surprises: --flagfile contents
// expanded in place (so recipes get the same checks), '-' in flag names read as '_'
// (--val-fraction), single-dash flags accepted, every flag name checked against the registered
// flags and every value parsed, so an unknown flag or a bad value exits 2 naming the closest
// flag (absl itself would exit 1). Values are passed through untouched.
absl::Status normalize_args(const std::vector<std::string>& in, std::vector<std::string>& out,
                            int depth = 0) {
  if (depth > 8) return absl::InvalidArgumentError("--flagfile nesting is deeper than 8 levels");
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string& a = in[i];
    if (a.size() < 2 || a[0] != '-' || a == "--") {
      out.push_back(a);
      continue;
    }
    const size_t dashes = a[1] == '-' ? 2 : 1;
    const size_t eq = a.find('=');
    std::string name = a.substr(dashes, eq == std::string::npos ? std::string::npos : eq - dashes);
    std::replace(name.begin(), name.end(), '-', '_');
    const bool has_value = eq != std::string::npos;
    if (name == "help" || name == "helpfull" || name == "helpshort" || name == "version" ||
        name == "helppackage" || name == "only_check_args") {
      out.push_back("--" + name);
      continue;
    }
    auto value_of = [&]() -> absl::StatusOr<std::string> {
      if (has_value) return a.substr(eq + 1);
      if (i + 1 < in.size()) return in[++i];
      return absl::InvalidArgumentError("flag --" + name + " needs a value");
    };
    if (name == "flagfile") {
      ZT_ASSIGN_OR_RETURN(std::string path, value_of());
      ZT_ASSIGN_OR_RETURN(std::string text, zt::read_file(path, "--flagfile"));
      std::vector<std::string> lines;
      for (absl::string_view line : absl::StrSplit(text, '\n')) {
        line = absl::StripAsciiWhitespace(line);
        if (!line.empty() && line[0] != '#' && !absl::StartsWith(line, "//"))
          lines.emplace_back(line);
      }
      ZT_RETURN_IF_ERROR(normalize_args(lines, out, depth + 1));
      continue;
    }
    // Only zerotrain's own flags (absl's --fromenv and friends would exit 1 on misuse).
    auto ours = [](absl::CommandLineFlag* f) {
      return f && f->Filename().find("trainer/main.cc") != std::string::npos ? f : nullptr;
    };
    absl::CommandLineFlag* flag = ours(absl::FindCommandLineFlag(name));
    if (!flag && name.starts_with("no") && !has_value) {  // --noshuffle
      absl::CommandLineFlag* f = ours(absl::FindCommandLineFlag(name.substr(2)));
      if (f && f->IsOfType<bool>()) {
        out.push_back("--" + name);
        continue;
      }
    }
    if (!flag) {
      std::string best;
      int best_d = 1 << 30;
      for (const auto& [n, f] : absl::GetAllFlags()) {
        if (!ours(f)) continue;
        const int d = zt::edit_distance(name, std::string(n));
        if (d < best_d) best_d = d, best = std::string(n);
      }
      return absl::InvalidArgumentError("unknown flag --" + name + "; did you mean --" + best +
                                        "? (`zerotrain --helpfull` lists every flag)");
    }
    if (flag->IsOfType<bool>() && !has_value) {
      out.push_back("--" + name);
      continue;
    }
    ZT_ASSIGN_OR_RETURN(std::string value, value_of());
    std::string err;
    const std::string saved = flag->CurrentValue();
    if (!flag->ParseFrom(value, &err))
      return absl::InvalidArgumentError("bad value '" + value + "' for --" + name + ": " + err);
    flag->ParseFrom(saved, &err);
    out.push_back("--" + name + "=" + value);
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  // Under mpirun, MPI comes up first and goes down last (after every communicator).
  std::unique_ptr<zt::MpiRuntime> mpi;
  if (zt::launched_under_mpi()) {
    auto rt = zt::MpiRuntime::init(&argc, &argv);
    if (!rt.ok()) return fail(rt.status());
    mpi = std::move(*rt);
  }
  absl::SetProgramUsageMessage(kUsage);
  // --help / -h anywhere: the usage (absl's --help would list no flags of its own and exit 1);
  // --helpfull still lists every flag. --version: ours (absl's names only its own build type).
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s\n", kUsage);
      return 0;
    }
    if (a == "--version" || a == "-version") {
      std::fputs(zt::version_report().c_str(), stdout);
      return std::fflush(stdout) == 0 ? 0 : fail(absl::InternalError("cannot write to stdout"));
    }
    if (a.starts_with("--version=") || a.starts_with("-version="))
      return fail(absl::InvalidArgumentError(
          absl::StrCat(std::string(a), ": --version takes no value; run `zerotrain --version`")));
  }
  std::vector<std::string> args = {argv[0]};
  if (const absl::Status s = normalize_args({argv + 1, argv + argc}, args); !s.ok()) return fail(s);
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  std::vector<char*> pos = absl::ParseCommandLine(static_cast<int>(cargv.size()), cargv.data());
  if (pos.size() < 2) {
    std::fprintf(stderr, "%s\n", kUsage);
    return zt::kUserErrorExitCode;
  }
  const std::string cmd = pos[1];
  zt::set_progress_quiet(absl::GetFlag(FLAGS_quiet));
  if (cmd == "compare") {  // the run directories are its arguments
    zt::CompareOptions o{{pos.begin() + 2, pos.end()},
                         absl::GetFlag(FLAGS_markdown),
                         absl::GetFlag(FLAGS_allow_different)};
    const auto table = zt::compare_runs(o);
    if (!table.ok()) return fail(table.status());
    std::fputs(table->c_str(), stdout);
    return std::fflush(stdout) == 0 ? 0 : fail(absl::InternalError("cannot write the table"));
  }
  if (pos.size() > 2)
    return fail(absl::InvalidArgumentError(std::string("unexpected argument '") + pos[2] +
                                           "'; flags start with --"));
  if (cmd == "info") return info();
  // Running out of host memory while building a model is the user's sizing, not a crash.
  auto or_out_of_memory = [](auto command, const char* advice) {
    try {
      return command();
    } catch (const std::bad_alloc&) {
      return fail(absl::ResourceExhaustedError(advice));
    }
  };
  auto given = [&](const std::string& flag) {
    return std::any_of(args.begin(), args.end(), [&](const std::string& a) {
      return a == flag || a.rfind(flag + "=", 0) == 0;
    });
  };
  if (cmd == "prepare") return prepare(given("--seq_len"));
  if (cmd == "train")
    return or_out_of_memory([&] { return train(given); },
                            "out of memory allocating the model, optimizer or activations; reduce "
                            "--seq_len or train_micro_batch_size_per_gpu, or use a smaller model");
  if (cmd == "estimate") return estimate(given("--model"));
  if (cmd == "export") return export_checkpoint();
  if (cmd == "sample") {
    // Flags only train reads would be ignored without a word: refuse them instead.
    for (const char* flag :
         {"--deepspeed", "--train_data", "--val_data", "--run_dir", "--steps", "--val_every",
          "--val_sequences", "--val_batches", "--shuffle", "--memory_report", "--comm_report",
          "--gradient_checkpointing", "--device_memory_limit", "--host_memory_limit",
          "--attention", "--save_dir",
          "--save_interval", "--keep_last", "--resume", "--resume_from", "--trace_steps"})
      if (given(flag))
        return fail(absl::InvalidArgumentError(
            absl::StrCat(flag, " is a train flag; sample does not read it")));
    return or_out_of_memory([&] { return sample(given); },
                            "out of memory building the model for sampling; use a shorter "
                            "--seq_len window");
  }
  return fail(absl::InvalidArgumentError("unknown command '" + cmd +
                                         "'; use info, prepare, train, sample, export, "
                                         "estimate or compare"));
}
