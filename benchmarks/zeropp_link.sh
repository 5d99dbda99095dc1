#!/usr/bin/env bash
# ZeRO++ against plain ZeRO stage 3 across a slow inter-node link, side by side in one run:
# two network namespaces as two nodes (tests/multinode/two_nodes.sh), 2 ranks each, the veth
# pair between them limited to RATE each way (default 1gbit) by a token-bucket filter (`tc
# qdisc ... tbf`: this sandbox's kernel has no netem, whose rate option would serve as well), then
# the same without the limit. Each mode trains shakespeare-llama (Psi 9.0M) in bf16 on
# random tokens for STEPS steps, alternating modes twice; the table gives the median step time of
# steps 3.. and the cross-node bytes a step (--comm_report). Needs root (network namespaces);
# CPU only, so the compute side is the 2-core machine's.
#
# With BASELINE (another build's zerotrain, e.g. of an earlier commit) its ZeRO++ runs join the
# alternation as a third column, so a change to the ZeRO++ path is measured against the old one
# in the same run.
#
# usage: benchmarks/zeropp_link.sh [path/to/zerotrain] [RATE] [STEPS] [BASELINE]
set -uo pipefail
ZT=${1:-$(cd "$(dirname "$0")/.." && pwd)/build/zerotrain}
RATE=${2:-1gbit}
STEPS=${3:-8}
BASELINE=${4:-}
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: zeropp_link: $*"; exit 1; }
[[ -x $ZT ]] || fail "zerotrain binary not found at $ZT"
[[ -z $BASELINE || -x $BASELINE ]] || fail "baseline binary not found at $BASELINE"
command -v tc >/dev/null || skip "'tc' (iproute2) not found"
source "$(dirname "$0")/../tests/multinode/two_nodes.sh"

python3 - "$WORK" <<'PY' || fail "could not write the data"
import json, random, struct, sys
work = sys.argv[1]
n = 400000
rng = random.Random(0)
tokens = [rng.randrange(32000) for _ in range(n)]
with open(f"{work}/train_000.bin", "wb") as f:
    f.write(struct.pack("<256i", *([20240520, 1, n] + [0] * 253)))
    f.write(struct.pack(f"<{n}H", *tokens))
base = {"train_batch_size": 8, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 3}}   # DeepSpeed's stage-3 defaults otherwise
json.dump(base, open(f"{work}/plain.json", "w"))
zpp = json.loads(json.dumps(base))
zpp["zero_optimization"].update(zero_quantized_weights=True, zero_hpz_partition_size=2,
                                zero_quantized_gradients=True)
json.dump(zpp, open(f"{work}/zeropp.json", "w"))
json.dump(zpp, open(f"{work}/baseline.json", "w"))
PY

run() {  # link mode repeat (mode "baseline": ZeRO++ on the BASELINE binary)
  local bin=$ZT
  [[ $2 == baseline ]] && bin=$BASELINE
  "${ON_A[@]}" "${MULTI[@]}" "$bin" train --model shakespeare-llama --seq_len 64 \
    --deepspeed "$WORK/$2.json" --train_data "$WORK/train_*.bin" --steps "$STEPS" \
    --sample_tokens 0 --threads 1 --comm_report --run_dir "$WORK/$1_$2_$3" \
    > "$WORK/$1_$2_$3.log" 2>&1 || { tail -5 "$WORK/$1_$2_$3.log"; fail "$1 $2 failed"; }
}
for link in limited unlimited; do
  if [[ $link == limited ]]; then
    for end in "$NS_A $VETH_A" "$NS_B $VETH_B"; do
      set -- $end
      ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$RATE" burst 256kb latency 100ms \
        || skip "tc cannot limit the veth pair (tbf)"
    done
  else
    ip netns exec "$NS_A" tc qdisc del dev "$VETH_A" root
    ip netns exec "$NS_B" tc qdisc del dev "$VETH_B" root
  fi
  for rep in 1 2; do
    for mode in plain zeropp ${BASELINE:+baseline}; do run "$link" "$mode" "$rep"; done
  done
done

python3 - "$WORK" "$RATE" "$STEPS" "$BASELINE" <<'PY'
import json, statistics, sys
work, rate, steps, baseline = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def stats(link, mode):  # medians over steps 3.. of both repeats: step ms, comm wait ms; bytes
    ms, wait, inter = [], [], 0
    for rep in (1, 2):
        d = f"{work}/{link}_{mode}_{rep}"
        rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if '"step_ms"' in l][2:]
        ms += [r["step_ms"] for r in rows]
        wait += [r["comm_wait_ms"] for r in rows]
        inter = json.load(open(f"{d}/comm_report_rank0.json"))["steps"][-1]["inter_node_bytes"]
    return statistics.median(ms), statistics.median(wait), inter
base_col = " ZeRO++ on the baseline (ms/step) |" if baseline else ""
print(f"| link between the two nodes | plain stage 3 (ms/step) | ZeRO++ qwZ+hpZ+qgZ (ms/step) |"
      f"{base_col} speed-up | cross-node MB/step plain / ZeRO++ | rank 0's communication wait "
      f"(ms/step) plain / ZeRO++{' / baseline' if baseline else ''} |")
print("|---|---|---|" + ("---|" if baseline else "") + "---|---|---|")
for link, label in (("limited", f"tc tbf rate {rate}"), ("unlimited", "veth, no limit")):
    p, pw, pi = stats(link, "plain")
    z, zw, zi = stats(link, "zeropp")
    b = stats(link, "baseline") if baseline else None
    bcol = f" {b[0]:.0f} |" if b else ""
    bwait = f" / {b[1]:.0f}" if b else ""
    print(f"| {label} | {p:.0f} | {z:.0f} |{bcol} {p / z:.2f}x | {pi / 1e6:.1f} / {zi / 1e6:.1f} |"
          f" {pw:.0f} / {zw:.0f}{bwait} |")
PY
