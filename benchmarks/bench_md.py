"""Shared by the benchmark scripts: replace or append one marked section of a markdown file."""
import os

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


def load_average():
    """The 1-minute load average, to show how busy the machine was."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")
