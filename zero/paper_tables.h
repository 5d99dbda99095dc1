// The ZeRO-Offload and ZeRO-Infinity papers' numeric tables, recomputed cell by cell from their
// own formulas and from zerotrain's memory model (zero/estimator.h), with the paper's printed
// value beside every cell where the two differ and the reason (docs/estimator.md says where each
// printed value was read):
//   ZeRO-Offload (Ren et al., USENIX ATC 2021, arXiv 2101.06840): Table 1 (GPU memory of each
//     offload strategy), §3's minimum PCIe volume per iteration (4M), Table 4 (Adam latency, from
//     the step-time model) and Figure 7 (the biggest model per system on 1, 4 and 16 V100s);
//   ZeRO-Infinity (Rajbhandari et al., SC21, arXiv 2104.07857): Figure 2(a) (memory of 0.1T to
//     100T models, equations 1-5), §4.2's bandwidth needs (equation 6, Figure 3), Table 3
//     (bandwidth needs of faster accelerators) and Figure 6(a) (max model size per strategy).
// The largest-model figures follow a stated rule (a 22.4 GB model-state budget a V100, the
// papers' PyTorch anchor; a DGX-2's host memory and NVMe; bytes from the memory model), not the
// papers' measured runs.
#pragma once

#include <string>
#include <vector>

namespace zt {

// One printed cell: ours (formatted as the paper formats it), the paper's as printed, and a
// note: why they differ (flagged), or how a claim in words relates to ours.
struct PaperCell {
  std::string ours;
  std::string paper;
  bool flagged = false;  // ours disagrees with the printed value: `note` says why
  std::string note;
};

struct PaperRow {
  std::string label;
  std::vector<PaperCell> cells;  // one per column
};

struct PaperTable {
  std::string id;     // "zero-offload/table1", ...: the fixture's key
  std::string title;  // as the paper captions it
  std::string notes;  // what is assumed, printed under the title
  std::vector<std::string> columns;
  std::vector<PaperRow> rows;
};

// ZeRO-Offload Table 1 and §3's minimum communication volume.
std::vector<PaperTable> zero_offload_tables();
// ZeRO-Infinity Figure 2(a), §4.2 (equation 6 against the Figure 3 statements) and Table 3.
std::vector<PaperTable> zero_infinity_tables();

// A table as text: one line per row, a cell that differs from the paper as "ours [paper: X]"
// with a numbered note under the table.
std::string render_paper_tables(const std::vector<PaperTable>& tables);

}  // namespace zt
