// Reference: PyTorch + Hugging Face transformers, computed in float64 by
// scripts/make_reference.py (tests/fixtures/README.md). Our CPU backend (fp32) must match the
// logits (max abs diff <= 2e-4), the loss (<= 1e-5), every gradient tensor (max abs diff <=
// 1e-4 x its max |reference|) and the losses of 10 AdamW steps (<= 1e-4), for a tiny GPT-2
// and a tiny LLaMA with grouped-query attention.
// With ZT_TEST_DEVICE=cuda the same checks run on the CUDA backend: on a GPU through
// scripts/gpu_check.sh (skipped without one), and in CI on the emulation as reference_emu_test
// (with the emulation's guard on, so no host code reads device memory).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/hf_weights.h"
#include "model/llmc_weights.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "nlohmann/json.hpp"
#include "tests/unit/nan_max.h"
#include "trainer/device.h"
#include "trainer/ds_config.h"
#include "trainer/engine_options.h"
#include "trainer/export.h"
#include "trainer/lr_schedule.h"
#include "zero/engine.h"

namespace zt {
namespace {

// The checkout's fixtures; ZT_SOURCE_DIR in the environment names another checkout (the GPU
// bundle of scripts/gpu_check.sh runs on a machine where this build's path does not exist).
const std::string kFixtures =
    std::string(std::getenv("ZT_SOURCE_DIR") ? std::getenv("ZT_SOURCE_DIR") : ZT_SOURCE_DIR) +
    "/tests/fixtures/";

struct Fixture {
  ModelConfig config;
  SafeTensorsFile weights, ref;
  std::vector<int> tokens, targets;
  int B = 0, T = 0;
};

Fixture load(const std::string& name) {
  const std::string dir = kFixtures + name;
  std::ifstream f(dir + "/config.json");
  std::stringstream ss;
  ss << f.rdbuf();
  auto c = config_from_hf_json(ss.str(), dir + "/config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  auto w = SafeTensorsFile::open(dir + "/model.safetensors");
  auto r = SafeTensorsFile::open(dir + "/reference.safetensors");
  EXPECT_TRUE(w.ok() && r.ok());
  Fixture fx{*c, std::move(*w), std::move(*r), {}, {}, 0, 0};
  auto ids = fx.ref.read_i64("input_ids");
  auto tg = fx.ref.read_i64("targets");
  auto info = fx.ref.info("input_ids");
  fx.B = static_cast<int>(info->shape[0]);
  fx.T = static_cast<int>(info->shape[1]);
  fx.tokens.assign(ids->begin(), ids->end());
  fx.targets.assign(tg->begin(), tg->end());
  return fx;
}

// The backend under test: ZT_TEST_DEVICE=cuda is the CUDA backend (null when no GPU is
// visible), else the CPU backend.
std::unique_ptr<Backend> test_backend() {
  const char* device = std::getenv("ZT_TEST_DEVICE");
  if (!device || std::string(device) != "cuda") return make_cpu_backend();
  auto be = make_backend(Device::kCuda, 0, 1, 0);
  return be.ok() ? std::move(*be) : nullptr;
}

// Model + engine loaded with the fixture's initial weights.
struct Loaded {
  std::unique_ptr<Backend> be = test_backend();
  std::unique_ptr<Communicator> comm = make_single_process_communicator(be.get());
  std::unique_ptr<Transformer> model;
  std::unique_ptr<Engine> engine;
};

// Model c for batches of B x T, its weights from `weights` (Hugging Face names); be is null
// when ZT_TEST_DEVICE=cuda finds no GPU.
Loaded build(const ModelConfig& c, int B, int T, const HfTensorReader& weights,
             EngineOptions opt = {}) {
  Loaded l;
  if (!l.be) return l;
  l.model = std::make_unique<Transformer>(c, l.be.get(), B, T);
  l.engine = std::make_unique<Engine>(l.model->layout(), l.be.get(), l.comm.get(), opt);
  const ParamLayout& layout = l.model->layout();
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<float> host(layout.units()[u].numel);
    const absl::Status s = load_hf_unit(weights, c, layout, u, host);
    EXPECT_TRUE(s.ok()) << s;
    l.engine->set_unit_params(u, host);
  }
  return l;
}

Loaded build(const Fixture& fx, EngineOptions opt = {}) {
  return build(fx.config, fx.B, fx.T, reader_of(fx.weights), opt);
}

// The largest |a[i] - b[i]|.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    d = nan_max(d, (double)std::fabs(a[i] - b[i]));
  return d;
}

void check_forward_backward(const std::string& name) {
  Fixture fx = load(name);
  Loaded l = build(fx);
  if (!l.be) GTEST_SKIP() << "ZT_TEST_DEVICE=cuda and no CUDA device is visible";
  const int V = fx.config.vocab_size;
  std::vector<float> logits((size_t)fx.B * fx.T * V), ref_logits(logits.size());
  l.model->logits(*l.engine, fx.tokens.data(), fx.B, fx.T, logits.data());
  ASSERT_TRUE(fx.ref.read_f32("logits", ref_logits).ok());
  EXPECT_LE(max_abs_diff(logits, ref_logits), 2e-4) << "logits";

  const auto res =
      l.model->forward(*l.engine, fx.tokens.data(), fx.targets.data(), fx.B, fx.T, 1.f);
  l.model->backward(*l.engine);
  float ref_loss;
  ASSERT_TRUE(fx.ref.read_f32("loss", {&ref_loss, 1}).ok());
  EXPECT_NEAR(res.loss, ref_loss, 1e-5);
  EXPECT_EQ(res.num_valid, fx.B * fx.T - 3);

  // Every HF gradient tensor, compared piece by piece in our layout.
  const ParamLayout& layout = l.model->layout();
  int tensors = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    const size_t n = layout.units()[u].numel;
    std::vector<float> ours(n), ref(n);
    l.engine->get_unit_grads(u, ours);
    ASSERT_TRUE(load_hf_unit(reader_of(fx.ref, "grad."), fx.config, layout, u, ref).ok());
    for (const HfPiece& p : hf_pieces(fx.config, layout, u)) {
      const size_t begin = p.slot->offset + p.row_offset * p.cols, len = p.rows * p.cols;
      double max_ref = 0, diff = 0;
      for (size_t i = begin; i < begin + len; ++i) {
        max_ref = std::max(max_ref, (double)std::fabs(ref[i]));
        diff = nan_max(diff, (double)std::fabs(ours[i] - ref[i]));
      }
      EXPECT_GT(max_ref, 0) << p.hf_name;
      EXPECT_LE(diff, 1e-4 * max_ref) << "grad of " << p.hf_name;
      ++tensors;
    }
  }
  EXPECT_EQ(tensors, (int)fx.weights.names().size());  // every HF tensor compared
}

void check_adamw(const std::string& name) {
  Fixture fx = load(name);
  float hp[5], ref[10];
  ASSERT_TRUE(fx.ref.read_f32("adamw_hparams", hp).ok());
  ASSERT_TRUE(fx.ref.read_f32("adamw_losses", ref).ok());
  EngineOptions opt;
  opt.optimizer = AdamWParams{hp[1], hp[2], hp[3], hp[4]};
  opt.gradient_clipping = 0.f;
  Loaded l = build(fx, opt);
  if (!l.be) GTEST_SKIP() << "ZT_TEST_DEVICE=cuda and no CUDA device is visible";
  for (int s = 0; s < 10; ++s) {
    const auto r =
        l.model->forward(*l.engine, fx.tokens.data(), fx.targets.data(), fx.B, fx.T, 1.f);
    l.model->backward(*l.engine);
    EXPECT_NEAR(r.loss, ref[s], 1e-4) << "AdamW step " << s;
    ASSERT_TRUE(l.engine->step(hp[0]).ok());
  }
}

// Gradient clipping against the transformers gradients (DeepSpeed clips as
// torch.nn.utils.clip_grad_norm_: c = max_norm / (norm + 1e-6) when the global L2 norm exceeds
// max_norm). With max_norm half the reference norm, one step must report the reference's norm
// and c, and leave the optimizer's states at their closed forms after step 1, g the
// transformers gradient: AdamW m = (1 - beta1) c g and v = (1 - beta2) (c g)^2; Lion
// m = (1 - beta2) c g; Adagrad sum = (c g)^2. A coefficient 1% off moves them by 1% of c g, far
// outside the gradients' own 1e-4 tolerance. The master weights move by lr c g / (|c g| + eps)
// (AdamW bias-corrected, and Adagrad) or lr sign(c g) (Lion), weight decay 0: the learning rate
// applied, by the optimizer asked for.
void check_clipped_step(const std::string& name, OptimizerKind kind = OptimizerKind::kAdamW) {
  Fixture fx = load(name);
  const ParamLayout layout(fx.config);
  std::vector<std::vector<float>> g(layout.num_units()), theta0(layout.num_units());
  double sq = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    g[u].resize(layout.units()[u].numel);
    theta0[u].resize(g[u].size());
    ASSERT_TRUE(load_hf_unit(reader_of(fx.ref, "grad."), fx.config, layout, u, g[u]).ok());
    ASSERT_TRUE(load_hf_unit(reader_of(fx.weights), fx.config, layout, u, theta0[u]).ok());
    for (float x : g[u]) sq += (double)x * x;
  }
  const double norm = std::sqrt(sq), max_norm = 0.5 * norm, c = max_norm / (norm + 1e-6);
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  EngineOptions opt;
  switch (kind) {  // weight decay 0
    case OptimizerKind::kAdamW:
      opt.optimizer = AdamWParams{.beta1 = beta1, .beta2 = beta2, .eps = eps};
      break;
    case OptimizerKind::kLion: opt.optimizer = LionParams{.beta1 = beta1, .beta2 = beta2}; break;
    case OptimizerKind::kAdagrad: opt.optimizer = AdagradParams{.eps = eps}; break;
    default: FAIL() << "no reference for " << optimizer_info(kind).name;
  }
  opt.gradient_clipping = (float)max_norm;
  Loaded l = build(fx, opt);
  if (!l.be) GTEST_SKIP() << "ZT_TEST_DEVICE=cuda and no CUDA device is visible";
  l.model->forward(*l.engine, fx.tokens.data(), fx.targets.data(), fx.B, fx.T, 1.f);
  l.model->backward(*l.engine);
  const auto st = l.engine->step(lr);
  ASSERT_TRUE(st.ok()) << st.status();
  // Every gradient within 1e-4 of its tensor's largest (check_forward_backward): the norm
  // within about that relative error.
  EXPECT_NEAR(st->grad_norm, norm, 2e-4 * norm) << name;
  EXPECT_NEAR(st->clip_coef, c, 2e-4 * c) << name;
  const std::string what = name + " " + optimizer_info(kind).name;
  for (int u = 0; u < layout.num_units(); ++u) {
    const size_t n = g[u].size();
    std::vector<float> master(n), m(n), v(n);
    l.engine->get_saved_state(u, master.data(), std::array<float*, 2>{m.data(), v.data()}.data());
    double gmax = 0;
    for (float x : g[u]) gmax = std::max(gmax, (double)std::fabs(x));
    const double tol = 2e-4 * c * gmax;  // the gradients' own error, clipped
    for (size_t i = 0; i < n; ++i) {
      const double cg = c * g[u][i];
      switch (kind) {
        case OptimizerKind::kAdamW:
          ASSERT_NEAR(m[i] / (1.0 - beta1), cg, tol) << what << " unit " << u << " m " << i;
          ASSERT_NEAR(std::sqrt(v[i] / (1.0 - beta2)), std::fabs(cg), tol)
              << what << " unit " << u << " v " << i;
          break;
        case OptimizerKind::kLion:
          ASSERT_NEAR(m[i] / (1.0 - beta2), cg, tol) << what << " unit " << u << " m " << i;
          break;
        case OptimizerKind::kAdagrad:
          ASSERT_NEAR(std::sqrt(m[i]), std::fabs(cg), tol) << what << " unit " << u << " sum " << i;
          break;
      }
      // Where the gradient's sign and size are sure, the step is lr |cg| / (|cg| + eps).
      if (std::fabs(cg) > 100 * tol) {
        const double step =
            kind == OptimizerKind::kLion ? lr * (cg > 0 ? 1 : -1) : lr * cg / (std::fabs(cg) + eps);
        ASSERT_NEAR(theta0[u][i] - master[i], step, 1e-3 * lr + 1e-6 * std::fabs(theta0[u][i]))
            << what << " unit " << u << " master " << i;
      }
    }
  }
}

TEST(Reference, TinyGpt2MatchesTransformers) { check_forward_backward("tiny_gpt2"); }

// --max_seq_len (model/config.h set_max_seq_len): attention is causal, so a model built for a
// shorter context gives transformers' logits on each row's first T' positions (GPT-2 loads the
// first T' rows of its learned positions), and a RoPE model built for a longer one gives them
// unchanged.
void check_context(const std::string& name, int max_seq_len, int T) {
  Fixture fx = load(name);
  ASSERT_TRUE(set_max_seq_len(fx.config, max_seq_len, name).ok());
  const int B = fx.B, V = fx.config.vocab_size, full = fx.T;
  ASSERT_LE(T, full);
  std::vector<int> tokens((size_t)B * T);
  for (int b = 0; b < B; ++b)
    std::copy_n(fx.tokens.begin() + (size_t)b * full, T, tokens.begin() + (size_t)b * T);
  fx.T = T;
  Loaded l = build(fx);
  if (!l.be) GTEST_SKIP() << "ZT_TEST_DEVICE=cuda and no CUDA device is visible";
  std::vector<float> logits((size_t)B * T * V), ref((size_t)B * full * V);
  l.model->logits(*l.engine, tokens.data(), B, T, logits.data());
  ASSERT_TRUE(fx.ref.read_f32("logits", ref).ok());
  double max_diff = 0;
  for (int b = 0; b < B; ++b)
    for (size_t i = 0; i < (size_t)T * V; ++i)
      max_diff = nan_max(max_diff, (double)std::fabs(logits[(size_t)b * T * V + i] -
                                                     ref[(size_t)b * full * V + i]));
  EXPECT_LE(max_diff, 2e-4) << name << " max_seq_len " << max_seq_len;
}
TEST(Reference, ShorterGpt2ContextKeepsItsFirstPositions) { check_context("tiny_gpt2", 5, 5); }
TEST(Reference, LongerLlamaContextChangesNoLogit) {
  check_context("tiny_llama", 4096, load("tiny_llama").T);
}
TEST(Reference, TinyLlamaGqaMatchesTransformers) { check_forward_backward("tiny_llama"); }
// The LLaMA family's variants, each from its own transformers class (scripts/make_reference.py):
// Qwen2's biases on q, k and v with tied embeddings; Mistral with one KV head and a sliding
// window longer than the batch (so the full causal attention); LLaMA's attention_bias and
// mlp_bias with tied embeddings.
TEST(Reference, TinyQwen2MatchesTransformers) { check_forward_backward("tiny_qwen2"); }
TEST(Reference, TinyMistralMatchesTransformers) { check_forward_backward("tiny_mistral"); }
TEST(Reference, TinyLlamaWithBiasesAndTiedEmbeddingsMatchesTransformers) {
  check_forward_backward("tiny_llama_biased_tied");
}
// config.json's head_dim apart from hidden_size / heads: queries and the attention's output
// wider than the residual stream (LLaMA, head_dim 12 at 32 / 4, as Qwen3's) and narrower
// (Mistral, head_dim 6, as Mistral-Nemo's).
TEST(Reference, HeadsSizedApartFromTheWidthMatchTransformers) {
  check_forward_backward("tiny_llama_wide_heads");
  check_forward_backward("tiny_mistral_narrow_heads");
}
// Llama 3.x's rope_scaling (rope_type llama3) with tied embeddings, as Llama 3.2 1B: one
// frequency kept, two blended, five divided by the factor (scripts/make_reference.py).
TEST(Reference, TinyLlama3RopeScalingMatchesTransformers) {
  check_forward_backward("tiny_llama3_rope_scaled");
}

// The logits zerotrain computes from the Hugging Face directory `dir` (through --init_from's
// reader) against those transformers computed from it, stored in `reference` (input_ids,
// logits).
void expect_transformers_logits(const std::string& dir, const std::string& reference,
                                const std::string& what) {
  std::ifstream f(dir + "/config.json");
  std::stringstream ss;
  ss << f.rdbuf();
  auto c = config_from_hf_json(ss.str(), dir + "/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  auto hf = open_hf_model_dir(dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  auto ref = SafeTensorsFile::open(reference);
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto ids = ref->read_i64("input_ids");
  ASSERT_TRUE(ids.ok());
  const int B = (int)ref->info("input_ids")->shape[0], T = (int)ref->info("input_ids")->shape[1];
  Loaded l = build(*c, B, T, reader_of(*hf));
  if (!l.be) GTEST_SKIP() << "ZT_TEST_DEVICE=cuda and no CUDA device is visible";
  const std::vector<int> tokens(ids->begin(), ids->end());
  std::vector<float> logits((size_t)B * T * c->vocab_size), want(logits.size());
  l.model->logits(*l.engine, tokens.data(), B, T, logits.data());
  ASSERT_TRUE(ref->read_f32("logits", want).ok());
  EXPECT_LE(max_abs_diff(logits, want), 2e-4) << what;
}

// Directories transformers' save_pretrained wrote sharded, in bf16 and fp32
// (scripts/make_hf_variants.py), load through --init_from's reader and give the logits
// transformers computes from the same saved weights.
TEST(Reference, ShardedBf16AndFp32SavesGiveTransformersLogits) {
  for (const std::string name : {"tiny_llama_bf16_sharded", "tiny_llama_fp32_sharded",
                                 "tiny_gpt2_bf16_sharded", "tiny_gpt2_fp32_sharded"}) {
    const std::string dir = kFixtures + name;
    auto hf = open_hf_model_dir(dir);
    ASSERT_TRUE(hf.ok()) << hf.status();
    EXPECT_GT(hf->shards().size(), 1u) << name;
    expect_transformers_logits(dir, dir + "/reference.safetensors", name);
  }
}

// A stored zerotrain save of the tiny LLaMA after 3 steps (scripts/make_export_fixture.py),
// exported again now: its logits are those transformers computed from the fixture's export.
// Old saves stay readable and the export stays what transformers reads.
TEST(Reference, ExportOfAStoredCheckpointGivesTransformersLogits) {
  const std::string ck = kFixtures + "tiny_llama_checkpoint";
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("zt_export_" + std::to_string(::getpid()));
  ExportOptions o;
  o.checkpoint = ck;
  o.out = out.string();
  o.dtype = "fp32";
  const absl::Status st = run_export(o);
  ASSERT_TRUE(st.ok()) << st;
  expect_transformers_logits(out.string(), ck + "/reference.safetensors", "export of " + ck);
  std::filesystem::remove_all(out);
}

// llm.c's GPT-2 model files (scripts/make_llmc_fixture.py writes the tiny GPT-2 fixture in
// llm.c's write_model layout): the fp32 file gives transformers' logits; the bf16 one holds
// the same weights rounded to bf16; a truncated file is refused.
TEST(Reference, LlmcModelFileGivesTransformersLogits) {
  Fixture fx = load("tiny_gpt2");
  auto f32 = LlmcModelFile::open(kFixtures + "tiny_gpt2/llmc_fp32.bin");
  auto b16 = LlmcModelFile::open(kFixtures + "tiny_gpt2/llmc_bf16.bin");
  ASSERT_TRUE(f32.ok()) << f32.status();
  ASSERT_TRUE(b16.ok()) << b16.status();
  EXPECT_TRUE(is_llmc_model_file(kFixtures + "tiny_gpt2/llmc_fp32.bin"));
  EXPECT_FALSE(is_llmc_model_file(kFixtures + "tiny_gpt2/model.safetensors"));
  const ModelConfig& c = f32->config();
  EXPECT_EQ(c.vocab_size, fx.config.vocab_size);
  EXPECT_EQ(c.n_layer, fx.config.n_layer);
  EXPECT_EQ(c.max_seq_len, fx.config.max_seq_len);
  const ParamLayout layout(c);
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<float> a(layout.units()[u].numel), b(a.size());
    ASSERT_TRUE(load_hf_unit(f32->reader(), c, layout, u, a).ok());
    ASSERT_TRUE(load_hf_unit(b16->reader(), c, layout, u, b).ok());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(b[i], bf16_to_f32(f32_to_bf16(a[i]))) << "unit " << u << " element " << i;
  }
  Loaded l = build(c, fx.B, fx.T, f32->reader());
  if (!l.be) GTEST_SKIP() << "ZT_TEST_DEVICE=cuda and no CUDA device is visible";
  const int V = c.vocab_size;
  std::vector<float> logits((size_t)fx.B * fx.T * V), ref(logits.size());
  l.model->logits(*l.engine, fx.tokens.data(), fx.B, fx.T, logits.data());
  ASSERT_TRUE(fx.ref.read_f32("logits", ref).ok());
  EXPECT_LE(max_abs_diff(logits, ref), 2e-4);
  // Truncated by one byte: refused, naming the sizes.
  const std::string cut = ::testing::TempDir() + "/llmc_cut.bin";
  {
    std::ifstream in(kFixtures + "tiny_gpt2/llmc_fp32.bin", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 1);
  }
  auto bad = LlmcModelFile::open(cut);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("truncated"), std::string::npos)
      << bad.status();
}
// Each ds_config key that changes training against DeepSpeed 0.19's own optimizers and
// schedulers: scripts/make_ds_keys_reference.py trains the tiny LLaMA fixture on its batch for 6
// steps with each optimizer's base config and with each of its keys changed alone: AdamW's
// betas, eps, weight_decay, adam_w_mode, bias_correction (DeepSpeedCPUAdam), gradient_clipping
// and the three schedulers; Lion's lr, betas, weight_decay (DeepSpeedCPULion); Adagrad's lr,
// eps, weight_decay, lr_decay (torch.optim.Adagrad, which DeepSpeed's engine builds); Muon's
// muon_lr, adam_lr, lr alone, momentum, betas, eps, weight_decay and a scheduler
// (MuonWithAuxAdam with the engine's param groups: the blocks' 2-D matrices take Muon, the
// embedding, head and norms AdamW). A run named "Opt/key" is compared with "Opt/base", the
// AdamW runs ("key") with "base". Here the same ds_config goes through the trainer's path
// (parse_ds_config, engine_options with Muon's AdamW half scheduled from its own rate, lr_at of
// the applied steps) and each run's losses must match DeepSpeed's and differ from its base
// run's by far more than that bound: a key parsed but not applied (or applied as the
// default), or a part of the model updated at another half's rate, fails.
// Bound 5e-5: the forward and backward in fp32 against float64 (each gradient to 1e-4 of its
// tensor's largest, Reference tests above) move the weights by under 1e-4 of lr per step; the
// losses (about 1) then differ by a few 1e-6 after 6 steps (seen: at most 4e-6, and 1.5e-5
// without bias correction, whose first steps are 3x longer). Every key moves some loss by at
// least 1.2e-2 from its base run's (DeepSpeed's default gradient_clipping 1.0 included).
// The ds_keys fixture's runs whose key is the learning rate or its schedule.
bool is_learning_rate_run(const std::string& name) {
  const std::string key = name.substr(name.find('/') + 1);  // npos + 1 = 0: the whole name
  return key == "lr" || key == "lr_alone" || key.rfind("scheduler_", 0) == 0;
}

TEST(Reference, DsConfigTrainingKeysMatchDeepSpeed) {
  std::ifstream f(kFixtures + "tiny_llama/ds_keys_reference.json");
  const nlohmann::json ref = nlohmann::json::parse(f);
  Fixture fx = load("tiny_llama");
  for (const auto& [name, run] : ref["runs"].items()) {
    const size_t slash = name.find('/');
    const std::string base_name =
        slash == std::string::npos ? "base" : name.substr(0, slash + 1) + "base";
    ASSERT_TRUE(ref["runs"].contains(base_name)) << name;
    const std::vector<double> base = ref["runs"][base_name]["losses"].get<std::vector<double>>();
    auto ds = parse_ds_config(run["ds_config"].dump(), 1, name);
    ASSERT_TRUE(ds.ok()) << ds.status();
    Loaded l = build(fx, engine_options(*ds));
    if (!l.be) GTEST_SKIP() << "ZT_TEST_DEVICE=cuda and no CUDA device is visible";
    // On the CUDA backend, the runs that change only the learning rate (lr, a scheduler) are
    // left out: the rate reaches the kernels as the one argument every run passes, and its
    // value is host code the CPU backend's pass checks (each run is ~10 s on the emulation).
    if (l.be->name() != "cpu" && is_learning_rate_run(name)) continue;
    const std::vector<double> want = run["losses"].get<std::vector<double>>();
    double worst = 0, apart = 0;
    for (size_t s = 0; s < want.size(); ++s) {
      const auto r =
          l.model->forward(*l.engine, fx.tokens.data(), fx.targets.data(), fx.B, fx.T, 1.f);
      l.model->backward(*l.engine);
      worst = nan_max(worst, std::fabs(r.loss - want[s]));
      apart = std::max(apart, std::fabs(want[s] - base[s]));
      // Muon's AdamW half takes its rate from engine_options' second_group_lr.
      const double lr = lr_at(ds->scheduler, ds->optimizer.lr, l.engine->steps_taken());
      ASSERT_TRUE(l.engine->step((float)lr).ok());
    }
    EXPECT_LE(worst, 5e-5) << name << ": the losses against DeepSpeed's";
    if (name != base_name) EXPECT_GT(apart, 100 * 5e-5) << name << " changes no loss";
  }
}

TEST(Reference, TinyGpt2AdamWLossesMatchTorch) { check_adamw("tiny_gpt2"); }
TEST(Reference, TinyLlamaAdamWLossesMatchTorch) { check_adamw("tiny_llama"); }
TEST(Reference, LlamaFamilyVariantsAdamWLossesMatchTorch) {
  for (const char* name :
       {"tiny_qwen2", "tiny_mistral", "tiny_llama_biased_tied", "tiny_llama3_rope_scaled",
        "tiny_llama_wide_heads", "tiny_mistral_narrow_heads"}) {
    SCOPED_TRACE(name);
    check_adamw(name);
  }
}
TEST(Reference, ClippedStepMatchesTransformersGradients) {
  check_clipped_step("tiny_gpt2");
  check_clipped_step("tiny_llama");
}
TEST(Reference, LionAndAdagradStepsFollowTheTransformersGradients) {
  for (OptimizerKind k : {OptimizerKind::kLion, OptimizerKind::kAdagrad}) {
    check_clipped_step("tiny_gpt2", k);
    check_clipped_step("tiny_llama", k);
  }
}

}  // namespace
}  // namespace zt
