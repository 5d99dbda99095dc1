"""Shared by the benchmark scripts: replace or append one marked section of a markdown file,
prepare the TinyShakespeare token shards the training benchmarks read, and the flags and
off/on rounds of the trainer comparisons."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(ROOT, "..", "shared", "data")

HEADER = ("# Benchmarks\n\nEach section is written by the script it names, from one invocation "
          "that measures every row back to back on the same machine and threads.\n\n")


def write_section(path, key, body):
    """Writes `body` between <!-- KEY:begin --> and <!-- KEY:end --> in `path`."""
    begin, end = f"<!-- {key}:begin -->", f"<!-- {key}:end -->"
    section = f"{begin}\n{body}\n{end}\n"
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    if begin in text and end in text:
        text = text[: text.index(begin)] + section + text[text.index(end) + len(end) + 1:]
    else:
        text = (text or HEADER).rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(text)


def publish(lines, loads, t0, markdown, key):
    """Adds the machine, load, date and command lines to `lines`, prints the section, and
    writes it into `markdown` under `key` when a path is given."""
    import datetime
    import platform
    import shlex
    import time
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    script = os.path.relpath(os.path.abspath(sys.argv[0]), os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    body = "\n".join(lines + [
        "",
        f"- Machine: {cpu}, {os.cpu_count()} logical cores; load average "
        f"{min(loads):.2f}-{max(loads):.2f} during the run.",
        f"- Date: {datetime.datetime.now():%Y-%m-%d %H:%M}; one invocation "
        f"({time.time() - t0:.0f} s).",
        f"- Command: `python3 {script} {shlex.join(sys.argv[1:])}`",
    ])
    print(body)
    if markdown:
        write_section(markdown, key, body)
        print(f"\nwrote section '{key}' in {markdown}", file=sys.stderr)


def load_average():
    """The 1-minute load average, to show how busy the machine was."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def prepare_shards(binary, shared_data, out):
    """TinyShakespeare tokenised with the Llama 2 tokenizer into `out` by `zerotrain prepare`;
    returns the training shards' glob."""
    subprocess.run([binary, "prepare", "--tokenizer",
                    os.path.join(shared_data, "llama2_tokenizer.model"), "--input",
                    os.path.join(shared_data, "tinyshakespeare.txt"), "--out", out],
                   check=True, capture_output=True)
    return os.path.join(out, "train_*.bin")


def add_trainer_args(ap, steps):
    """The flags of a benchmark that runs the trainer on the NVMe offload paths."""
    ap.add_argument("--model", default="gpt2-124m")
    ap.add_argument("--nvme_path", default="/tmp")
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "zerotrain"))
    ap.add_argument("--shared-data", default=SHARED_DATA)
    ap.add_argument("--markdown", default=None)


def alternate(rounds, measure, label):
    """measure(False) and measure(True) in each round, the first of them alternating, so a busy
    moment cannot favour one side; returns ({False: [...], True: [...]}, load averages)."""
    res, loads = {False: [], True: []}, []
    for r in range(rounds):
        for flag in ((False, True) if r % 2 == 0 else (True, False)):
            loads.append(load_average())
            res[flag].append(measure(flag))
            print(f"round {r + 1} {label} {flag}: {res[flag][-1]}", file=sys.stderr)
    return res, loads
