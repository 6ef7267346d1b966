"""digits-tf1-flags: a seed-era TF1 between-graph program whose cluster comes only from flags.

Nothing about the cluster is read from the environment: --ps_hosts,
--worker_hosts, --job_name and --task_index are required, --chief_hosts is
optional. The request passes them as `$(PS_HOSTS)`, `$(WORKER_HOSTS)`,
`$(JOB_NAME)`, `$(TASK_INDEX)` (and `$(CHIEF_HOSTS)`), which the pod's
bootstrap expands as Kubernetes would (docs/pod-protocol.md). Unexpanded text
such as `$(JOB_NAME)` is refused ("invalid choice").

Every replica starts a `tf.compat.v1.train.Server` on the flags' cluster:
- ps replicas hold the variables and `join()` forever (the platform stops them);
- every trainer (the chief when --chief_hosts names one, and every worker)
  builds the graph with `replica_device_setter` (variables on the ps, ops on
  itself) and trains asynchronously in a `MonitoredTrainingSession` until the
  shared global step reaches --train_steps;
- the TF1 chief (job `chief` when there is one, else worker 0) initialises the
  variables, writes checkpoints (to MODEL_DIR, or to the checkpoint directory
  below), and at the end evaluates on the test split and writes {"accuracy",
  "loss", "steps", "train_seconds"} to METRICS_FILE.

Summaries: the chief writes `tf.compat.v1.summary` scalars `loss` and
`accuracy` with a `FileWriter` (and the graph) into --summary_dir, default the
TENSORBOARD_DIR the platform sets (copied to S3), for TensorBoard, at the steps
it prints TFJOB_METRIC lines; without one nothing is written.

Checkpoints: with --checkpoint_dir (default: the CHECKPOINT_DIR the platform
sets) the chief's `MonitoredTrainingSession` checkpoints there every
CHECKPOINT_EVERY_STEPS global steps and restores the newest one when it starts,
so a restarted job trains only the steps still missing to --train_steps; the
final model is then saved to MODEL_DIR as well. The chief prints `resumed from
step N` or `starting from step 0`. The chief's own CPU writes and reads the
files, not the ps holding the variables: only the chief's directories leave its
pod. Without a checkpoint directory, MODEL_DIR is the checkpoint directory, as
it always was.
"""

import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1

HIDDEN_UNITS = 64
BATCH_SIZE = 64
REPORT_EVERY_STEPS = 50  # a point of the curves, from the chief
LEARNING_RATE = 0.003
SEED = 7
CHIEF_INIT_POLL_SECS = 0.5
CHIEF_INIT_TIMEOUT_SECS = 600
CHECKPOINT_EVERY_STEPS = 100  # with a checkpoint directory: a restart repeats at most these
CHECKPOINTS_KEPT = 2


def host_list(text):
    """A comma-separated list of host:port, as TF1 programs took them."""
    hosts = [host for host in text.split(",") if host]
    if not hosts or any(":" not in host for host in hosts):
        raise argparse.ArgumentTypeError(
            f"{text!r} given; a comma-separated host:port list is required"
        )
    return hosts


def parse_flags():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ps_hosts", type=host_list, required=True)
    parser.add_argument("--worker_hosts", type=host_list, required=True)
    parser.add_argument("--chief_hosts", type=host_list, default=[])
    parser.add_argument("--job_name", choices=("chief", "ps", "worker"), required=True)
    parser.add_argument("--task_index", type=int, required=True)
    # Where to read and write, as every example does (the pod protocol's paths).
    parser.add_argument("--data_dir", default=os.environ.get("DATA_DIR", "../data"))
    parser.add_argument("--model_dir", default=os.environ.get("MODEL_DIR", "../model"))
    parser.add_argument("--metrics_file", default=os.environ.get("METRICS_FILE", ""))
    parser.add_argument("--checkpoint_dir", default=os.environ.get("CHECKPOINT_DIR", ""))
    parser.add_argument("--summary_dir", default=os.environ.get("TENSORBOARD_DIR", ""))
    parser.add_argument("--train_steps", type=int, default=600)
    flags = parser.parse_args()
    if flags.job_name == "chief" and not flags.chief_hosts:
        parser.error("--job_name chief needs --chief_hosts")
    tasks = {"chief": flags.chief_hosts, "ps": flags.ps_hosts, "worker": flags.worker_hosts}
    if not 0 <= flags.task_index < len(tasks[flags.job_name]):
        parser.error(
            f"--task_index {flags.task_index} given; the {flags.job_name} job has "
            f"{len(tasks[flags.job_name])} task(s)"
        )
    if not flags.metrics_file:
        flags.metrics_file = os.path.join(flags.model_dir, "..", "metrics.json")
    return flags


def load_digits(data_dir):
    with np.load(os.path.join(data_dir, "digits.npz")) as data:
        return data["x_train"], data["y_train"], data["x_test"], data["y_test"]


def write_metrics(path, metrics):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as out:
        json.dump(metrics, out)


def build_graph(features, labels):
    """A two-layer perceptron in plain TF1 ops; returns (logits, mean loss)."""
    init = tf1.glorot_uniform_initializer(seed=SEED)
    w1 = tf1.get_variable("w1", [64, HIDDEN_UNITS], initializer=init)
    b1 = tf1.get_variable("b1", [HIDDEN_UNITS], initializer=tf1.zeros_initializer())
    w2 = tf1.get_variable("w2", [HIDDEN_UNITS, 10], initializer=init)
    b2 = tf1.get_variable("b2", [10], initializer=tf1.zeros_initializer())
    hidden = tf.nn.relu(tf.matmul(features, w1) + b1)
    logits = tf.matmul(hidden, w2) + b2
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    )
    return logits, loss


def read_checkpoint_step(checkpoint_dir):
    """The global step of the newest checkpoint in `checkpoint_dir` (0: none)."""
    latest = tf1.train.latest_checkpoint(checkpoint_dir)
    return int(tf1.train.load_variable(latest, "global_step")) if latest else 0


def save_final_model(session, saver, model_dir, step):
    """MODEL_DIR as MonitoredTrainingSession leaves it: graph.pbtxt and model.ckpt-<step>."""
    os.makedirs(model_dir, exist_ok=True)
    saver.save(session, os.path.join(model_dir, "model.ckpt"), global_step=step)
    graph_def = tf1.get_default_graph().as_graph_def(add_shapes=True)
    tf1.train.write_graph(graph_def, model_dir, "graph.pbtxt")


def wait_for_chief_init(target, config, task_device):
    """Non-chief trainers: wait until the chief has initialised the variables.

    MonitoredTrainingSession would check too, but only every 30 seconds; a
    short job would be over before a non-chief worker joined in.
    """
    with tf1.device(task_device):
        uninitialized_variables = tf1.report_uninitialized_variables()
    deadline = time.monotonic() + CHIEF_INIT_TIMEOUT_SECS
    with tf1.Session(target, config=config) as session:
        while len(session.run(uninitialized_variables)) > 0:
            if time.monotonic() > deadline:
                raise SystemExit("the chief did not initialise the model in time")
            time.sleep(CHIEF_INIT_POLL_SECS)


def main():
    flags = parse_flags()
    tf1.disable_eager_execution()
    jobs = {"chief": flags.chief_hosts} if flags.chief_hosts else {}
    jobs |= {"ps": flags.ps_hosts, "worker": flags.worker_hosts}
    cluster = tf1.train.ClusterSpec(jobs)
    server = tf1.train.Server(cluster, job_name=flags.job_name, task_index=flags.task_index)
    print(f"{flags.job_name} {flags.task_index} of {jobs} serving at {server.target}", flush=True)
    if flags.job_name == "ps":
        server.join()
        return

    # The chief job, when the cluster has one, is TF1's chief; else worker 0.
    is_chief = flags.job_name == "chief" or (not flags.chief_hosts and flags.task_index == 0)
    x_train, y_train, x_test, y_test = load_digits(flags.data_dir)
    task_device = f"/job:{flags.job_name}/task:{flags.task_index}"
    with tf1.device(tf1.train.replica_device_setter(worker_device=task_device, cluster=cluster)):
        global_step = tf1.train.get_or_create_global_step()
        features = tf1.placeholder(tf.float32, [None, 64], name="features")
        labels = tf1.placeholder(tf.int64, [None], name="labels")
        logits, loss = build_graph(features, labels)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.float32))
        train_op = tf1.train.AdamOptimizer(LEARNING_RATE).minimize(loss, global_step=global_step)
        summaries = tf1.summary.merge(
            [tf1.summary.scalar("loss", loss), tf1.summary.scalar("accuracy", accuracy)]
        )

    # Talk only to the ps and to ourselves: no waiting for the other trainers.
    session_config = tf1.ConfigProto(device_filters=["/job:ps", task_device])
    if not is_chief:
        wait_for_chief_init(server.target, session_config, task_device)
    checkpoint_dir = flags.checkpoint_dir or flags.model_dir  # by hand: MODEL_DIR, as always
    # With a checkpoint directory, save often enough that a restart loses little.
    cadence = {"save_checkpoint_steps": CHECKPOINT_EVERY_STEPS} if flags.checkpoint_dir else {}
    scaffold = model_saver = None
    if is_chief:
        # Savers on the chief's CPU: files are written and read there, not on the ps.
        with tf1.device(f"{task_device}/device:CPU:0"):
            saver = tf1.train.Saver(max_to_keep=CHECKPOINTS_KEPT, save_relative_paths=True)
            scaffold = tf1.train.Scaffold(saver=saver)
            if checkpoint_dir != flags.model_dir:
                model_saver = tf1.train.Saver(max_to_keep=1, save_relative_paths=True)
        restored_step = read_checkpoint_step(checkpoint_dir)
        print(
            f"resumed from step {restored_step}" if restored_step else "starting from step 0",
            flush=True,
        )
    seed_offset = 100 if flags.job_name == "chief" else flags.task_index
    rng = np.random.default_rng(SEED + seed_offset)
    hooks = [tf1.train.StopAtStepHook(last_step=flags.train_steps)]
    # TensorBoard's summaries, from the chief as the curves are; none without a summary dir.
    writer = None
    if is_chief and flags.summary_dir:
        writer = tf1.summary.FileWriter(flags.summary_dir, tf1.get_default_graph())
    started = time.monotonic()
    local_steps = 0
    with tf1.train.MonitoredTrainingSession(
        master=server.target,
        is_chief=is_chief,
        checkpoint_dir=checkpoint_dir if is_chief else None,
        scaffold=scaffold,
        hooks=hooks,
        config=session_config,
        log_step_count_steps=0,
        save_summaries_steps=None,
        save_summaries_secs=None,
        **cadence,
    ) as session:
        while not session.should_stop():
            batch = rng.choice(len(x_train), BATCH_SIZE, replace=False)
            feed = {features: x_train[batch], labels: y_train[batch]}
            if is_chief and local_steps % REPORT_EVERY_STEPS == 0:
                # docs/pod-protocol.md, "Metrics while training": this batch's loss and
                # accuracy at the global step, from the chief.
                _, batch_loss, batch_accuracy, summary, at = session.run(
                    [train_op, loss, accuracy, summaries, global_step], feed_dict=feed
                )
                if writer:
                    writer.add_summary(summary, int(at))
                point = {
                    "step": int(at),
                    "loss": round(float(batch_loss), 5),
                    "accuracy": round(float(batch_accuracy), 5),
                }
                print("TFJOB_METRIC " + json.dumps(point), flush=True)
            else:
                session.run(train_op, feed_dict=feed)
            local_steps += 1
    train_seconds = time.monotonic() - started
    if writer:
        writer.close()
    print(f"{flags.job_name} {flags.task_index} ran {local_steps} steps", flush=True)
    if not is_chief:
        return

    # The variables stay on the ps: evaluate them in a plain session.
    with tf1.Session(server.target, config=session_config) as session:
        test_accuracy, test_loss, steps = session.run(
            [accuracy, loss, global_step], feed_dict={features: x_test, labels: y_test}
        )
        if model_saver:
            save_final_model(session, model_saver, flags.model_dir, steps)
    metrics = {
        "accuracy": float(test_accuracy),
        "loss": float(test_loss),
        "steps": int(steps),
        "train_seconds": round(train_seconds, 2),
    }
    write_metrics(flags.metrics_file, metrics)
    print(f"test accuracy {test_accuracy:.4f}, loss {test_loss:.4f}, {steps} steps", flush=True)


if __name__ == "__main__":
    main()
