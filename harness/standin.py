"""The stand-in training program of the pipeline tests, and its bundle.

A small Python program (no TensorFlow) that does what the pod protocol asks of
a training program: prints its TF_CONFIG, writes a model and metrics, and
behaves as the request's env `STANDIN_BEHAVIOUR` says, per replica or "*":
`{"worker-1": {"exit": 3}}`, `{"*": {"sleep": 600}}`, `{"*": {"no_model": true}}`,
`{"worker-0": {"sleep": 30, "metric_every": 1}}` (while sleeping, every second a
`TFJOB_METRIC {"step": …, "loss": …, "accuracy": …}` line and a line
`standin <replica> tick <n> at <unix time>`),
`{"chief-0": {"sleep": 45, "checkpoint_every": 1}}` (a checkpoint `ckpt-<step>`:
its `.data-00000-of-00001` shard, its `.index`, then TensorFlow's `checkpoint`
pointer in CHECKPOINT_DIR every second; with `"steps": N` instead of `sleep`,
until step N, restored steps included), `{"worker-0": {"log_flood_mib": 1024, "flood_after": 20}}`
(after `flood_after` seconds, N MiB of log as fast as it can, in 16 KiB lines, then
`standin <replica> flood done`).
With the request's env `STANDIN_SUMMARIES=1` every replica (ps included) first writes
`standin-<replica>.txt` in its TENSORBOARD_DIR (not an event file: no reader takes it for
one), as a program writing summaries would. With `STANDIN_EVENTS=<base64>` every replica
writes those bytes (a TensorBoard event file, e.g. harness/event_files.py's `frame`) as
`events.out.tfevents.0.standin-<replica>` in its TENSORBOARD_DIR, as tf.summary would.
A replica whose CHECKPOINT_DIR holds a
pointer prints `standin <replica> resumed from step N` and counts on from there.
ps replicas wait forever, like TensorFlow's.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

STANDIN_PROGRAM = textwrap.dedent(
    '''
    """Stand-in for a TensorFlow program: what the pod protocol gives it, without TensorFlow."""
    import base64, json, os, sys, time

    role, index = os.environ["TFJOB_ROLE"], os.environ["TFJOB_INDEX"]
    me = f"{role}-{index}"
    print(f"standin {me} TF_CONFIG={os.environ.get('TF_CONFIG', '')}", flush=True)
    print(f"standin {me} legacy JOB_NAME={os.environ.get('JOB_NAME', '')} "
          f"WORKER_HOSTS={os.environ.get('WORKER_HOSTS', '')}", flush=True)
    behaviour = json.loads(os.environ.get("STANDIN_BEHAVIOUR") or "{}")
    mine = behaviour.get(me, behaviour.get("*", {}))
    if os.environ.get("STANDIN_SUMMARIES") == "1":
        with open(os.path.join(os.environ["TENSORBOARD_DIR"], f"standin-{me}.txt"), "w") as out:
            out.write(f"summaries of {me}\\n")
    if os.environ.get("STANDIN_EVENTS"):
        name = f"events.out.tfevents.0.standin-{me}"
        with open(os.path.join(os.environ["TENSORBOARD_DIR"], name), "wb") as out:
            out.write(base64.b64decode(os.environ["STANDIN_EVENTS"]))
    if role == "ps" and not mine:
        while True:  # like TensorFlow's ps: join() forever
            time.sleep(1)
    if mine.get("log_flood_mib"):  # a replica flooding its log (16 KiB lines)
        time.sleep(mine.get("flood_after", 0))
        line = b"f" * (16 * 1024 - 17) + b"\\n"
        for i in range(mine["log_flood_mib"] * 64):
            sys.stdout.buffer.write(b"%016d" % i + line)
        sys.stdout.buffer.flush()
        print(f"standin {me} flood done", flush=True)
    checkpoints = os.environ.get("CHECKPOINT_DIR")
    step = 0
    if checkpoints and os.path.exists(os.path.join(checkpoints, "checkpoint")):
        with open(os.path.join(checkpoints, "checkpoint")) as handle:
            latest = handle.read().split('"')[1]  # model_checkpoint_path: "ckpt-N"
        with open(os.path.join(checkpoints, latest + ".index")) as handle:
            step = int(handle.read().split()[1])  # restored along with its pointer
        print(f"standin {me} resumed from step {step}", flush=True)
    every = mine.get("checkpoint_every")
    if every and checkpoints:  # TensorFlow's way: the step's files, then the pointer
        deadline = time.monotonic() + mine.get("sleep", 0)
        target = mine.get("steps")  # train to this step, counting restored ones
        while step < target if target else time.monotonic() < deadline:
            time.sleep(every)
            step += 1
            # A data shard, then the index, as tf.train.Checkpoint writes them: the pod's
            # sync sends a pointer only once the checkpoint it names is whole.
            with open(os.path.join(checkpoints, f"ckpt-{step}.data-00000-of-00001"),
                      "w") as handle:
                handle.write(f"weights at step {step}")
            with open(os.path.join(checkpoints, f"ckpt-{step}.index"), "w") as handle:
                handle.write(f"step {step}")
            with open(os.path.join(checkpoints, ".checkpoint.tmp"), "w") as handle:
                handle.write(f'model_checkpoint_path: "ckpt-{step}"\\n')
            os.replace(os.path.join(checkpoints, ".checkpoint.tmp"),
                       os.path.join(checkpoints, "checkpoint"))
    else:
        deadline = time.monotonic() + mine.get("sleep", 0)
        tick = mine.get("metric_every")  # a curve point and a timed tick line every `tick` s
        while tick and time.monotonic() + tick <= deadline:
            time.sleep(tick)
            step += 1
            point = {"step": 10 * step, "loss": round(2.0 / step, 4),
                     "accuracy": round(1 - 1 / (step + 1), 4)}
            print("TFJOB_METRIC " + json.dumps(point), flush=True)
            print(f"standin {me} tick {step} at {time.time():.3f}", flush=True)
        time.sleep(max(0.0, deadline - time.monotonic()))
    if mine.get("exit"):
        print(f"standin {me} failing on purpose with {mine['exit']}", file=sys.stderr, flush=True)
        sys.exit(mine["exit"])
    if mine.get("no_model"):
        print(f"standin {me} done without a model", flush=True)
        sys.exit(0)
    with open(os.path.join(os.environ["DATA_DIR"], "numbers.txt")) as handle:
        total = sum(int(line) for line in handle if line.strip())
    os.makedirs(os.environ["MODEL_DIR"], exist_ok=True)
    with open(os.path.join(os.environ["MODEL_DIR"], "model.json"), "w") as handle:
        json.dump({"trained_by": me, "total": total}, handle)
    with open(os.environ["METRICS_FILE"], "w") as handle:
        json.dump({"accuracy": 0.99, "total": total, "replica": me}, handle)
    print(f"standin {me} done", flush=True)
    '''
)


def write_standin_bundle(folder: Path) -> Path:
    from runtime.bundle import write_bundle

    src = folder / "standin-src"
    (src / "code").mkdir(parents=True, exist_ok=True)
    (src / "data").mkdir(parents=True, exist_ok=True)
    (src / "code" / "train.py").write_text(STANDIN_PROGRAM)
    (src / "data" / "numbers.txt").write_text("1\n2\n3\n")
    out = folder / "standin.tar.gz"
    write_bundle(src, out, "standin")
    return out
