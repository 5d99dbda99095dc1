#!/usr/bin/env python3
"""Writes tests/fixtures/tensorboard_events.bin: the TensorBoard event file that PyTorch's
SummaryWriter.add_scalar (through TensorBoard's own protos and RecordWriter) writes for the
rows of `ROWS`, every event at wall time WALL_TIME, so that a C++ test can hold the tensorboard
monitor (trainer/tensorboard_monitor.cc) to the same bytes. Needs `pip install tensorboard`.

    python3 scripts/make_tensorboard_fixture.py [OUT]
"""
import sys

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

WALL_TIME = 1700000000.25
# (tag, x, value) as the monitor writes them for two steps at train_batch_size 8 (fp16 off,
# wall_clock_breakdown on) and a validation after the second: tests/unit/monitor_test.cc
# builds the same StepRecords. lr 0 at step 1 checks that a 0.0 is written, as TensorBoard's
# oneof writes it.
ROWS = []
for step, loss, lr, norm, tps, fwd, bwd, opt in ((1, 10.5, 0.0, 2.25, 1024.0, 3.5, 7.0, 1.25),
                                                  (2, 9.75, 3e-4, 1.5, 2048.0, 3.0, 6.5, 1.0)):
    x = step * 8
    ROWS += [("Train/Samples/train_loss", x, loss), ("Train/Samples/lr", x, lr),
             ("Train/Samples/grad_norm", x, norm), ("Train/Samples/tokens_per_s", x, tps),
             ("Train/Samples/elapsed_time_ms_forward", x, fwd),
             ("Train/Samples/elapsed_time_ms_backward", x, bwd),
             ("Train/Samples/elapsed_time_ms_step", x, opt)]
ROWS.append(("Train/Samples/val_loss", 16, 9.625))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/tensorboard_events.bin"
    w = RecordWriter(open(out, "wb"))
    # EventFileWriter's first event.
    w.write(event_pb2.Event(wall_time=WALL_TIME, file_version="brain.Event:2").SerializeToString())
    for tag, x, value in ROWS:  # SummaryWriter.add_scalar: summary.scalar(new_style=False)
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag,
                                                                        simple_value=value)])
        w.write(event_pb2.Event(wall_time=WALL_TIME, step=x,
                                summary=summary).SerializeToString())
    w.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
