// What `zerotrain estimate` is asked (main.cc fills it from the flags): read by estimate.h's
// memory plans and tables, and by recommend.h's search, which estimate calls.
#pragma once

#include <cstdint>
#include <string>

namespace zt {

struct EstimateOptions {
  // "zero-paper": Table 1 and Figure 1 of the ZeRO paper; "zero-offload", "zero-infinity": the
  // ZeRO-Offload and ZeRO-Infinity papers' tables (zero/paper_tables.h).
  std::string table;
  std::string formula;  // "deepspeed": DeepSpeed's estimate_zero{2,3}_model_states_mem_needs
  std::string model;    // preset; empty -> params
  int64_t params = 0;   // Ψ when no preset
  int64_t largest_layer_params = 0;  // DeepSpeed ZeRO-3 L when no preset (required then)
  int stage = -1;                    // ZeRO stage 0-3; -1: every stage (DeepSpeed: 2 and 3)
  int dp = 0;                        // N_d; 0 -> gpus_per_node * nodes
  int gpus_per_node = 1;
  int nodes = 1;
  std::string param_dtype = "bf16";
  std::string grad_dtype = "bf16";
  std::string offload_optimizer = "none";
  std::string offload_param = "none";
  int micro_batch = 0;  // activations need a preset, micro_batch and seq_len
  int seq_len = 0;
  // Activation checkpointing, as train's flag: every block (or as the ds_config's
  // activation_checkpointing section says).
  bool gradient_checkpointing = false;
  // A ds_config.json: precision, stage, offload and micro-batch come from it (as `train` reads
  // it), for N_d = dp ranks; the dtype, offload, stage and micro_batch options must be unset.
  std::string deepspeed;
  // Bytes available per rank (0: not checked): the estimate then says whether it fits. The
  // ds_config's zerotrain.device_memory_limit and host_memory_limit serve when these are 0.
  int64_t device_memory = 0, host_memory = 0;
  // "cuda": activations in the working dtype, as a GPU keeps them; otherwise fp32, as the CPU
  // backend (train's --device; auto counts as the CPU here, so the estimate is the same on
  // every machine).
  std::string device = "cpu";
  // --time: the step-time model (zero/step_time.h) for the --deepspeed run on `hardware` (a
  // built-in profile, or "this": measured here, the drive under nvme_path or /tmp).
  bool time = false;
  std::string hardware = "this";
  std::string nvme_path;
  double inter_node_gbps = 0;  // --time over several --nodes: Gbit/s a rank between nodes (0: the profile's)
  // --time on the CPU backend: train's --threads and --optimizer_threads (0: not given; the
  // latter then from zerotrain.optimizer_threads, else all the rank's cores).
  int threads = 0, optimizer_threads = 0;
  // --recommend (trainer/recommend.h): the best layouts for device_memory and host_memory;
  // --write: the best as a ds_config at this path.
  bool recommend = false;
  std::string write;
};

}  // namespace zt
