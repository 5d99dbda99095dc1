// `zerotrain train`: the training loop. Library code: takes options, never reads flags.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace zt {

struct TrainOptions {
  std::string model = "shakespeare-llama";  // preset name (zerotrain info lists them)
  std::string init_from;   // Hugging Face model directory to start from (else random init)
  std::string deepspeed;   // ds_config.json path (required)
  std::string train_data;  // glob of training shards
  std::string val_data;    // glob of validation shards (empty: no validation)
  std::string tokenizer;   // sentencepiece model: vocab check and decoding samples
  std::string run_dir = "runs/latest";  // metrics.jsonl goes here
  int seq_len = 256;                    // T
  int64_t max_seq_len = 0;              // the model's context (0: its own); model/config.h
  int64_t steps = 100;                  // optimizer steps
  int val_every = 50;                   // steps between validations (0: only at start and end)
  int64_t val_sequences = 128;          // validation set: its first sequences (of T+1 tokens)
  int sample_tokens = 128;              // tokens generated at the end (0: none)
  std::string sample_prompt;            // text the sample continues (empty: BOS)
  float temperature = 0.8f;             // sampling temperature (0: greedy)
  int top_k = 50;                       // sampling restricted to the k most likely tokens (0: all)
  float top_p = 1.f;                    // and to the nucleus of probability top_p (1: off)
  uint64_t seed = 1337;                 // initialisation, data order and sampling
  bool shuffle = true;                  // shuffle training data each epoch
  std::string device = "auto";          // auto, cpu or cuda (trainer/device.h)
  std::string attention;  // auto, flash, cudnn (empty: zerotrain.attention, else auto)
  int threads = 0;                      // OpenMP threads (0: cores / ranks on this node)
  int optimizer_threads = 0;  // --optimizer_threads: the offloaded update's (0: not given)
  bool memory_report = false;           // write memory_report_rank<r>.json into run_dir
  bool comm_report = false;             // write comm_report_rank<r>.json into run_dir
  int64_t device_memory_limit = 0;      // bytes (0: none); also zerotrain.device_memory_limit
  int64_t host_memory_limit = 0;        // bytes (0: none); also zerotrain.host_memory_limit
  bool gradient_checkpointing = false;  // also zerotrain.gradient_checkpointing
  // --trace_steps FIRST,LAST: zerotrain.trace on for those steps (0, 0: as the ds_config says).
  int64_t trace_first = 0, trace_last = 0;
  // The NVMe parameter store reads shards ahead; main turns it off when the environment has
  // ZEROTRAIN_PARAM_READ_AHEAD=0 (benchmarks/param_read_ahead.py's comparison).
  bool param_read_ahead = true;
  // Checkpoints (trainer/checkpoint.h), also the zerotrain block's keys of the same names:
  std::string save_dir;       // where saves go (empty: no saves)
  int64_t save_interval = -1;  // steps between saves (0: at the end only; -1: not given)
  int64_t keep_last = -1;      // saves kept (0: all; -1: not given)
  bool resume = false;         // continue from save_dir's latest save, if there is one
  std::string resume_from;     // continue from this save (or this save_dir's latest)
};

// Trains; prints a progress line per step and writes metrics.jsonl. Errors a user can cause
// (files, config, sizes) come back as a Status before any training starts.
absl::Status run_train(const TrainOptions& opt);

}  // namespace zt
