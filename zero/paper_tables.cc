#include "zero/paper_tables.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "zero/estimator.h"
#include "zero/step_time.h"

namespace zt {
namespace {

constexpr double kTiB = 1024.0 * 1024 * 1024 * 1024, kGiB = 1024.0 * 1024 * 1024;

// `decimals` places, half away from zero as the papers round (1.625 -> "1.63", where printf's
// round-half-even on the exact binary value gives "1.62").
std::string fixed(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return absl::StrFormat("%.*f", decimals, std::floor(x * scale + 0.5 + 1e-9) / scale);
}

// Ours and the paper's cell; flagged when they differ and no `agrees` note explains it.
PaperCell cell(std::string ours, std::string paper, std::string note = "") {
  const bool flagged = !paper.empty() && ours != paper;
  return {std::move(ours), std::move(paper), flagged, std::move(note)};
}
PaperCell same(const std::string& printed) { return {printed, printed, false, ""}; }
// A claim in words ("over 50% above 70 GB/s") that our number satisfies: not flagged.
PaperCell agrees(std::string ours, std::string paper, std::string note) {
  return {std::move(ours), std::move(paper), false, std::move(note)};
}

// Device model-state bytes per parameter of one layout on one rank (N_d = 1), bf16 parameters
// and gradients, an fp32 master and two optimizer states (K = 12): zerotrain's memory model.
double device_bytes_per_param(int stage, OffloadDevice optimizer, OffloadDevice params) {
  EstimateInput in;
  in.psi = 1'000'000'000;
  in.stage = stage;
  in.offload_optimizer = optimizer;
  in.offload_param = params;
  const auto e = estimate_memory(in);
  return e.ok() ? (double)e->device_model_states() / in.psi : NAN;
}

PaperTable offload_table1() {
  PaperTable t{"zero-offload/table1",
               "ZeRO-Offload Table 1: memory savings for offload strategies that minimize "
               "communication volume compared to the baseline",
               "GPU bytes of model states per parameter M: p16 2, g16 2, the update's fp32 "
               "parameter, momentum and variance 12 (mixed-precision Adam). Rows 1, 3 and 4 are "
               "zerotrain's memory model (zero/estimator.h) at N_d = 1 for stage 0, stage 1 with "
               "offload_optimizer cpu and stage 2 with offload_optimizer cpu; row 2 has no "
               "zerotrain layout (optimizer on the GPU, gradients on the CPU) and is summed from "
               "its placement.",
               {"FWD-BWD", "p16", "g16", "Update", "Memory", "Reduction"},
               {}};
  const OffloadDevice kNone = OffloadDevice::kNone, kCpu = OffloadDevice::kCpu;
  struct Row {
    const char *g16, *update;
    double bytes;
    const char *memory, *reduction;
  };
  const Row rows[] = {
      {"gpu", "gpu", device_bytes_per_param(0, kNone, kNone), "16M", "1x (baseline)"},
      {"cpu", "gpu", 2 + 12, "14M", "1.14x"},
      {"gpu", "cpu", device_bytes_per_param(1, kCpu, kNone), "4M", "4x"},
      {"cpu", "cpu", device_bytes_per_param(2, kCpu, kNone), "4M", "8x"},
  };
  for (const Row& r : rows) {
    const double reduction = 16 / r.bytes;
    const std::string red =
        r.bytes == 16 ? "1x (baseline)"
                      : (reduction == std::floor(reduction) ? absl::StrCat((int)reduction, "x")
                                                            : fixed(reduction, 2) + "x");
    const std::string mem = absl::StrCat(absl::StrFormat("%g", r.bytes), "M");
    t.rows.push_back(
        {absl::StrCat("g16 ", r.g16, ", update ", r.update),
         {same("gpu"), same("gpu"), same(r.g16), same(r.update),
          cell(mem, r.memory,
               mem == r.memory ? ""
                               : "the paper prints 4M beside 8x; with only p16 on the GPU its own "
                                 "accounting gives 2M (16M / 8), as does zerotrain's stage 2 "
                                 "with offload_optimizer cpu"),
          cell(red, r.reduction)}});
  }
  return t;
}

PaperTable offload_volume() {
  // Traffic per iteration at N_d = 1 as the engine moves it (docs/offload.md "Traffic per
  // step"): stage 2 with offload_optimizer cpu sends the 16-bit gradient out and brings the
  // 16-bit parameter back, G and P bytes per parameter.
  const int G = dtype_size(DType::kBF16), P = dtype_size(DType::kBF16);
  PaperTable t{"zero-offload/volume",
               "ZeRO-Offload §3: the minimum CPU-GPU communication volume of any model-state "
               "offload strategy, per iteration",
               "Bytes per parameter M; ours is what zerotrain's stage 2 with offload_optimizer "
               "cpu moves per step (measured by --comm_report in the test "
               "Cli.OffloadMovesTheZeroOffloadPapersFourM).",
               {"Volume"},
               {}};
  t.rows.push_back({"g16 to the CPU", {cell(absl::StrCat(G, "M"), "2M")}});
  t.rows.push_back({"p16 to the GPU", {cell(absl::StrCat(P, "M"), "2M")}});
  t.rows.push_back({"total", {cell(absl::StrCat(G + P, "M"), "4M")}});
  return t;
}

PaperTable offload_table4() {
  PaperTable t{"zero-offload/table4",
               "ZeRO-Offload Table 4: Adam latency (s) for PyTorch (PT) and CPU-Adam",
               "zerotrain's step-time model (zero/step_time.h): Adam streams 28 bytes a "
               "parameter (fp32 master, m and v read and written, the 16-bit gradient in and "
               "parameter out) at the memory bandwidth where it runs, here the v100-32gb "
               "profile's (a DGX-2: host 100 GB/s, HBM2 900 GB/s). CPU-Adam is that bound; "
               "PyTorch's CPU Adam (PT-CPU) runs element by element, not at the memory's rate, "
               "and is not modelled.",
               {"CPU-Adam", "PT-CPU", "PT-GPU (L2L)"},
               {}};
  const auto hw = hardware_profile("v100-32gb");
  const char* printed[5][3] = {{"0.22", "1.39", "0.10"},
                               {"0.51", "2.75", "0.26"},
                               {"1.03", "5.71", "0.64"},
                               {"2.41", "11.93", "0.87"},
                               {"2.57", "14.76", "1.00"}};
  const int billions[5] = {1, 2, 4, 8, 10};
  for (int i = 0; i < 5; ++i) {
    const double psi = billions[i] * 1e9;
    const std::string cpu = fixed(psi * 28 / hw->host_bw, 2),
                      gpu = fixed(psi * 28 / hw->device_bw, 2);
    t.rows.push_back(
        {absl::StrCat(billions[i], " billion"),
         {cell(cpu, printed[i][0],
               "a memory-bound Adam at 100 GB/s; the paper's CPU-Adam reached 93-127 GB/s "
               "of 28-byte updates on its two Xeon 8168s (AVX-512, 12 DDR4-2666 channels)"),
          cell("-", printed[i][1], "PyTorch's CPU Adam: not modelled (not memory-bound)"),
          cell(gpu, printed[i][2],
               "a memory-bound Adam at the V100's 900 GB/s; PyTorch's GPU Adam of the time ran "
               "several kernels a tensor (no fused or foreach step), reading states more than once "
               "(L2L "
               "also moves each layer's states over PCIe)")}});
  }
  return t;
}

// ZeRO-Infinity's model shapes (Figure 2(a)): layers nl, hidden hd, attention heads, and the
// row's printed cells.
struct InfinityRow {
  const char* size;  // the nominal size the text names the row by
  int nl, hd_k, heads;
  const char* printed[9];
};
constexpr InfinityRow kInfinityRows[] = {
    {"0.1T", 80, 10, 128, {"0.10", "80", "10K", "128", "1.83", "2.03", "0.05", "1.95", "1.63"}},
    {"0.5T", 100, 20, 160, {"0.50", "100", "20K", "160", "9.16", "3.91", "0.12", "6.25", "2.50"}},
    {"1T", 128, 25, 256, {"1.01", "128", "25K", "256", "18.31", "7.13", "0.20", "9.77", "3.56"}},
    {"10T",
     195,
     64,
     512,
     {"10.05", "195", "64K", "512", "182.81", "24.38", "0.76", "64.00", "8.00"}},
    {"100T",
     315,
     160,
     1024,
     {"101.47", "315", "160K", "1024", "1845.70", "88.59", "3.08", "400.00", "18.00"}},
};

PaperTable infinity_figure2a() {
  PaperTable t{
      "zero-infinity/figure2a",
      "ZeRO-Infinity Figure 2(a): memory requirements for massive models",
      "Equations 1-5 with K = 1024 in sizes, TB = 1024^4, GB = 1024^3 bytes: parameters "
      "12 nl hd^2 (eq. 1, in 1e12); model states 240 nl hd^2 (eq. 2: 20 bytes a parameter, fp16 "
      "and fp32 gradients both counted); activations 2 bsz seq nl (16 hd + 2 heads seq) (the "
      "paper gives no formula for this column; this one reproduces all five cells); activation "
      "checkpoints 2 bsz seq hd nl / ci (eq. 3); model-state working memory 4 hd 4hd (eq. 4); "
      "activation working memory bsz seq ci (16 hd + 2 heads seq) (eq. 5); bsz 32 a node and 4 a "
      "GPU, seq 1024, ci 1, as the text states. The last column is zerotrain's memory model "
      "(stage 0, bf16, K = 12: 16 bytes a parameter, no fp32 gradient copy): not in the paper.",
      {"Params (T)", "Layers", "Hidden", "Attn heads", "Model states (TB)", "Act. (TB/node)",
       "Act. ckpt (TB/node)", "Working mem/GPU: model states (GB)", "Working mem/GPU: act. (GB)",
       "zerotrain model states (TB)"},
      {}};
  const double seq = 1024, node_bsz = 32, gpu_bsz = 4, ci = 1;
  for (const InfinityRow& r : kInfinityRows) {
    const double nl = r.nl, hd = r.hd_k * 1024.0, heads = r.heads;
    const double params = 12 * nl * hd * hd;
    const double per_token = 16 * hd + 2 * heads * seq;  // a block's activation bytes a token
    const double mswm = 4 * hd * 4 * hd;
    EstimateInput in;
    in.psi = (int64_t)params;
    const auto e = estimate_memory(in);
    const std::string ours[10] = {fixed(params / 1e12, 2),
                                  absl::StrCat(r.nl),
                                  absl::StrCat(r.hd_k, "K"),
                                  absl::StrCat(r.heads),
                                  fixed(240 * nl * hd * hd / kTiB, 2),
                                  fixed(2 * node_bsz * seq * nl * per_token / kTiB, 2),
                                  fixed(2 * node_bsz * seq * hd * nl / ci / kTiB, 2),
                                  fixed(mswm / kGiB, 2),
                                  fixed(gpu_bsz * seq * ci * per_token / kGiB, 2),
                                  e.ok() ? fixed((double)e->device_model_states() / kTiB, 2) : "?"};
    PaperRow row{r.size, {}};
    for (int c = 0; c < 10; ++c) {
      const std::string printed = c < 9 ? r.printed[c] : "";
      std::string note;
      if (c == 7 && ours[c] != printed)
        note = absl::StrCat("eq. 4 gives 4 hd 4hd = 16 x ", r.hd_k, "K^2 bytes = ", ours[c],
                            " GB; the printed ", printed, " would need hd = ",
                            fixed(std::sqrt(std::stod(printed) * kGiB / 16) / 1024, 1),
                            "K (the other rows follow eq. 4 exactly)");
      row.cells.push_back(cell(ours[c], printed, note));
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

// Equation 6: efficiency = ait bw / (ait bw + peak); the bandwidth for efficiency e is
// peak e / (ait (1 - e)). peak 70 TFlops (the paper's V100 average), seq 1024.
double bandwidth_for(double efficiency, double ait, double peak = 70e12) {
  return peak * efficiency / (ait * (1 - efficiency));
}

PaperTable infinity_bandwidth() {
  PaperTable t{"zero-infinity/bandwidth",
               "ZeRO-Infinity §4.2 (Figure 3): bandwidth each kind of offloaded data needs",
               "Equation 6 with peak 70 TFlops, seq 1024; arithmetic intensity seq bsz for "
               "parameters and gradients (eq. 9), seq bsz / 4 for optimizer states (eq. 10), "
               "24 hd ci for activation checkpoints (eq. 11, ci 1). GB/s = 1e9 bytes/s. The "
               "paper states these in words (its Figure 3 prints no values).",
               {"Needed (eq. 6)"},
               {}};
  const double seq = 1024;
  const double pg = bandwidth_for(0.5, seq * 1) / 1e9;
  t.rows.push_back({"params and grads, bsz 1, 50% efficiency",
                    {agrees(fixed(pg, 1) + " GB/s", "above 70 GB/s achieves over 50%",
                            "agrees: 70 GB/s is above the 50% point")}});
  const double os = bandwidth_for(0.5, seq * 1 / 4) / 1e9;
  t.rows.push_back({"optimizer states against params and grads, same bsz, 50%",
                    {agrees(fixed(os / pg, 0) + "x", "nearly 4x higher",
                            "agrees: the intensity is a quarter")}});
  const double os90 = bandwidth_for(0.9, seq * 2 / 4) / 1e12;
  t.rows.push_back({"optimizer states, bsz 2, 90% efficiency",
                    {cell(fixed(os90, 2) + " TB/s", "nearly 1.5 TB/s",
                          absl::StrCat("eq. 6 at 70 TFlops and seq 1024 gives ", fixed(os90, 2),
                                       " TB/s; 1.5 TB/s would need ",
                                       fixed(1.5e12 * (seq * 2 / 4) / 9 / 1e12, 1),
                                       " TFlops, or seq ", fixed(2 * 9 * 70e12 / 1.5e12, 0)))}});
  const double ac2 = bandwidth_for(0.5, 24 * 2048.0) / 1e9;
  t.rows.push_back({"activation checkpoints, hd 2K, 50%",
                    {agrees(fixed(ac2, 2) + " GB/s", "only 2 GB/s sustains over 50%",
                            "agrees: 2 GB/s is above the 50% point")}});
  const double ac8 = bandwidth_for(0.5, 24 * 8192.0) / 1e9;
  t.rows.push_back(
      {"activation checkpoints, hd 8K, 50%",
       {agrees(fixed(ac8, 2) + " GB/s", "below 1 GB/s", "agrees: below 1 GB/s from hd 8K on")}});
  return t;
}

PaperTable infinity_table3() {
  PaperTable t{"zero-infinity/table3",
               "ZeRO-Infinity Table 3: bandwidth requirements for ZeRO-Infinity to remain "
               "efficient on a cluster of 512 accelerator devices with 10x and 100x more "
               "achievable compute than NVIDIA V100 GPUs",
               "Equation 6 depends on bw / peak only, so each requirement scales with compute. "
               "Slow memory: the DGX-2's 3.0 GB/s per GPU (Figure 2(b)), with which offloaded "
               "activation checkpoints at hd 8K run at the efficiency in the last row; "
               "aggregate = 512 devices x that, in TB = 1024 GB (1536 GB/s -> 1.5); "
               "GPU-to-GPU: eq. 6 for parameters and gradients at bsz 1 and 50% (§4.2).",
               {"V100", "10x", "100x"},
               {}};
  const double scale[] = {1, 10, 100};
  const char* peak_p[] = {"0.07", "0.70", "7.00"};
  const char* slow_p[] = {"3.0", "30.0", "300.0"};
  const char* agg_p[] = {"1.5", "15.0", "150.0"};
  const char* gpu_p[] = {"70.0", "700.0", "7000.0"};
  PaperRow peak{"achievable peak (pflops/device)", {}}, slow{"slow memory bw (GB/s/device)", {}},
      agg{"slow memory aggregate bw (TB/s)", {}}, gpu{"GPU-to-GPU bw (GB/s)", {}},
      eff{"act. ckpt efficiency at hd 8K (eq. 6)", {}};
  for (int i = 0; i < 3; ++i) {
    const double s = scale[i], p = 70e12 * s, bw = 3.0e9 * s;
    peak.cells.push_back(cell(fixed(p / 1e15, 2), peak_p[i]));
    slow.cells.push_back(cell(fixed(bw / 1e9, 1), slow_p[i]));
    agg.cells.push_back(cell(fixed(512 * bw / 1e9 / 1024, 1), agg_p[i]));
    const double g = bandwidth_for(0.5, 1024, p) / 1e9;
    gpu.cells.push_back(cell(fixed(g, 1), gpu_p[i],
                             "eq. 6 at bsz 1 and 50% gives 68.4 GB/s a V100; the paper rounds "
                             "to §4.2's 70 GB/s"));
    const double ait = 24 * 8192.0;
    eff.cells.push_back(cell(fixed(100 * ait * bw / (ait * bw + p), 1) + "%", ""));
  }
  t.rows = {peak, slow, agg, gpu, eff};
  return t;
}

// Words of `text` on lines of at most 100 columns, continuation lines indented by `indent`.
std::string wrap(const std::string& text, const std::string& indent) {
  std::string out, line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && line.size() + 1 + word.size() > 100) {
      absl::StrAppend(&out, line, "\n");
      line = indent;
    }
    absl::StrAppend(&line, line.empty() || line == indent ? "" : " ", std::string(word));
  }
  return line.empty() ? out : absl::StrCat(out, line, "\n");
}

// ---- The largest model per system (ZeRO-Offload Figure 7, ZeRO-Infinity Figure 6(a)) ----

// One DGX-2 as both papers use it: V100 32 GB GPUs, 1.5 TB (binary: DIMMs) of host memory, 28 TB
// (decimal: drives) of NVMe (ZeRO-
// Infinity Figure 2(b)). The model-state budget of a GPU is the papers' own anchor: 1.4B is the
// largest model PyTorch trains (16 bytes a parameter: 22.4 GB); the rest of the 32 GB holds
// activations, working buffers and fragmentation at the papers' batch sizes, taken as the same
// for every system.
constexpr double kGpuStateBudget = 16 * 1.4e9, kHostBytes = 1.5 * 1024 * 1024 * 1024 * 1024,
                 kNvmeBytes = 28e12;

// A ZeRO layout on N ranks of one node.
struct Layout {
  int stage, n;
  OffloadDevice optimizer = OffloadDevice::kNone, params = OffloadDevice::kNone;
};

// Does a model of Ψ parameters (100 equal blocks, so buffers sized by the largest unit are a
// block's) fit: model states within the GPU budget, the node's host memory (all N ranks) and
// its NVMe, by zerotrain's memory model (bf16, K = 12)?
bool fits(const Layout& l, double psi) {
  EstimateInput in;
  in.unit_numel.assign(100, (int64_t)(psi / 100));
  in.stage = l.stage;
  in.dp = l.n;
  in.offload_optimizer = l.optimizer;
  in.offload_param = l.params;
  const auto e = estimate_memory(in);
  return e.ok() && (double)e->device_model_states() <= kGpuStateBudget &&
         (double)e->host_total() * l.n <= kHostBytes && (double)e->nvme() * l.n <= kNvmeBytes;
}

// The largest Ψ that fits, in billions (bisection on 1e8 .. 1e14; within 0.1%).
double largest_billions(const Layout& l) {
  double lo = 1e8, hi = 1e14;
  if (!fits(l, lo)) return 0;
  while (hi / lo > 1.001) {
    const double mid = std::sqrt(lo * hi);
    (fits(l, mid) ? lo : hi) = mid;
  }
  return lo / 1e9;
}

// As the figures print sizes: one decimal below 10 ("1.4", "8"), whole billions above.
std::string billions(double b) {
  if (!std::isfinite(b)) return "-";
  if (b >= 10) return absl::StrCat(std::llround(b));
  std::string s = fixed(b, 1);
  if (s.size() > 2 && s.substr(s.size() - 2) == ".0") s.resize(s.size() - 2);
  return s;
}

constexpr char kLargestNotes[] =
    "Billions of parameters. Rule: a GPU holds 22.4 GB of model states (the papers' own anchor: "
    "PyTorch's largest, 1.4B x 16 bytes; the rest of the V100's 32 GB goes to activations and "
    "buffers), one DGX-2 node 1.5 TB of host memory and 28 TB of NVMe (ZeRO-Infinity Figure "
    "2(b)); each ZeRO system's bytes per parameter come from zerotrain's memory model (bf16, "
    "K = 12), Megatron's from tensor parallelism (16 bytes / MP); model parallelism that the "
    "papers add to ZeRO-Offload is not modelled. The papers measured real runs: their "
    "activations grow with the model and their batch sizes differ per system, which this rule "
    "does not follow: cells differ by 5-84% (most under 40%; the widest where the papers added "
    "model parallelism).";

PaperTable offload_figure7() {
  PaperTable t{"zero-offload/figure7",
               "ZeRO-Offload Figure 7: the size of the biggest model that can be trained on a "
               "single GPU, 4 and 16 GPUs (one DGX-2 node)",
               kLargestNotes,
               {"1 GPU", "4 GPUs", "16 GPUs"},
               {}};
  const OffloadDevice kCpu = OffloadDevice::kCpu;
  const int gpus[] = {1, 4, 16};
  struct System {
    const char* name;
    const char* printed[3];
    std::function<double(int)> largest;  // NAN: not modelled
    const char* note;
  };
  const System systems[] = {
      {"PyTorch DDP",
       {"1.4", "1.4", "1.4"},
       [&](int n) {
         return largest_billions({0, n});
       },
       ""},
      {"Megatron",
       {"1.4", "4.5", "15"},
       [&](int n) { return kGpuStateBudget / (16.0 / n) / 1e9; },
       "tensor parallelism over all GPUs would give 16 bytes / MP a parameter; Megatron also "
       "replicates its embeddings and keeps activations that do not shrink with MP"},
      {"ZeRO-2",
       {"1.4", "3.9", "8"},
       [&](int n) {
         return largest_billions({2, n});
       },
       "stage 2 keeps 2 + 14 / N_d bytes a parameter on a GPU; the measured bars also carry "
       "each run's activations"},
      {"SwapAdvisor",
       {"8", "8", "8"},
       [](int) { return NAN; },
       "not a ZeRO layout (swapping by a genetic search): not modelled"},
      {"L2L",
       {"17", "17", "17"},
       [](int) { return NAN; },
       "not a ZeRO layout (one layer at a time on the GPU): not modelled"},
      {"ZeRO-Offload",
       {"13", "30", "70"},
       [&](int n) {
         return largest_billions({2, n, kCpu});
       },
       "stage 2 with the optimizer on the CPU keeps the 2-byte p16 of every parameter on each "
       "GPU, whatever N_d; the paper adds model parallelism (MP 2-8, its Table 3) beyond one GPU "
       "and ran 13B at batch 4"},
  };
  for (const System& sys : systems) {
    PaperRow row{sys.name, {}};
    for (int i = 0; i < 3; ++i) {
      const std::string ours = billions(sys.largest(gpus[i]));
      row.cells.push_back(cell(ours, sys.printed[i], sys.note));
    }
    t.rows.push_back(std::move(row));
  }
  // The paper's headline ratio: 13B on one GPU against PyTorch's 1.4B.
  const double ratio = largest_billions({2, 1, kCpu}) / largest_billions({0, 1});
  t.rows.push_back({"ZeRO-Offload / PyTorch",
                    {cell(fixed(ratio, 1) + "x", "9.3x (13 / 1.4)",
                          "the paper's 13B ran at batch 4 a GPU, its models up to 2B at batch 32 "
                          "(its Table 3): the larger activations of the small models left "
                          "PyTorch less of the GPU for model states than this rule gives it"),
                     cell("", ""), cell("", "")}});
  return t;
}

PaperTable infinity_figure6a() {
  PaperTable t{"zero-infinity/figure6a",
               "ZeRO-Infinity Figure 6(a): max model size w.r.t. ZeRO strategies (one DGX-2, 16 "
               "GPUs)",
               kLargestNotes,
               {"Max model size (B)"},
               {}};
  const OffloadDevice kCpu = OffloadDevice::kCpu, kNvme = OffloadDevice::kNvme;
  struct System {
    const char* name;
    const char* printed;
    double largest;
    const char* note;
  };
  const System systems[] = {
      {"Data parallel", "1.4", largest_billions({0, 16}), ""},
      {"ZeRO 2", "10", largest_billions({2, 16}),
       "2 + 14/16 bytes a parameter on a GPU; the paper's 10B ran at batch 1 a GPU"},
      {"ZeRO Offload", "13", largest_billions({2, 16, kCpu}),
       "the 2-byte p16 of every parameter on each GPU; the paper's 13B ran at batch 1"},
      {"ZeRO 3", "20", largest_billions({3, 16}),
       "16/16 bytes a parameter on a GPU; the paper's 20B is the largest of its configurations "
       "(Table 4) that ran"},
      {"3D Parallelism", "20", NAN, "tensor and pipeline parallelism: not modelled"},
      {"ZeRO-Inf-CPU", "70", largest_billions({3, 16, kCpu, kCpu}),
       "host memory holds p16, g16 and the fp32 states (16 bytes a parameter): 1.5 TiB / 16; the "
       "paper's 70B is its largest configuration that ran (hidden 8K, 125 layers), with "
       "activation checkpoints and pinned buffers in host memory as well"},
      {"ZeRO-Inf-NVMe", "1000", largest_billions({3, 16, kNvme, kNvme}),
       "zerotrain keeps the 16-bit gradient shards in host memory (2 bytes a parameter for the "
       "node: 1.5 TiB / 2 less the NVMe windows) where DeepSpeed's optimizer swapper writes them "
       "to NVMe (swap_out_gradients); "
       "the bar has no printed value, 1000 is the configuration of the paper's Table 4 (1000B) "
       "that ran"},
  };
  for (const System& s : systems)
    t.rows.push_back({s.name, {cell(billions(s.largest), s.printed, s.note)}});
  return t;
}

}  // namespace

std::vector<PaperTable> zero_offload_tables() {
  return {offload_table1(), offload_volume(), offload_table4(), offload_figure7()};
}

std::vector<PaperTable> zero_infinity_tables() {
  return {infinity_figure2a(), infinity_bandwidth(), infinity_table3(), infinity_figure6a()};
}

std::string render_paper_tables(const std::vector<PaperTable>& tables) {
  std::string out;
  for (const PaperTable& t : tables) {
    absl::StrAppend(&out, wrap(t.title, ""), wrap(t.notes, ""), "\n");
    std::vector<std::string> notes;
    std::vector<std::vector<std::string>> lines = {{""}};
    for (const std::string& c : t.columns) lines[0].push_back(c);
    for (const PaperRow& r : t.rows) {
      std::vector<std::string> line = {r.label};
      for (const PaperCell& c : r.cells) {
        std::string s = c.ours;
        if (!c.paper.empty() && c.paper != c.ours) {  // flagged [..], or agreeing in words (..)
          auto n = std::find(notes.begin(), notes.end(), c.note);
          if (n == notes.end()) n = notes.insert(n, c.note);
          absl::StrAppend(&s, c.flagged ? " [paper: " : " (paper: ", c.paper, "; note ",
                          n - notes.begin() + 1, c.flagged ? "]" : ")");
        }
        line.push_back(s);
      }
      lines.push_back(std::move(line));
    }
    std::vector<size_t> width(lines[0].size(), 0);
    for (const auto& l : lines)
      for (size_t c = 0; c < l.size(); ++c) width[c] = std::max(width[c], l[c].size());
    for (const auto& l : lines) {
      std::string s;
      for (size_t c = 0; c < l.size(); ++c)
        absl::StrAppend(&s, c ? " | " : "", absl::StrFormat("%-*s", width[c], l[c]));
      while (!s.empty() && s.back() == ' ') s.pop_back();
      absl::StrAppend(&out, s, "\n");
    }
    for (size_t i = 0; i < notes.size(); ++i)
      absl::StrAppend(&out, wrap(absl::StrCat("  note ", i + 1, ": ", notes[i]), "    "));
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace zt
