"""digits-ps: TF2 ParameterServerStrategy with a custom training loop.

Cluster: one chief, one or more ps, two workers (TF_CONFIG set by the
platform). Only the chief runs this program's training logic: it builds the
model on the parameter servers and schedules steps on the workers through a
`ClusterCoordinator`. Keras 3's `model.fit` does not work under this strategy,
hence the custom loop.

ps and worker replicas only start their gRPC server and `join()`: they never
exit, and the platform stops them once the chief is done. The chief evaluates
on the digits test split, saves the model to MODEL_DIR and writes
{"accuracy", "loss", "steps"} to METRICS_FILE.

Checkpoints: when the platform sets CHECKPOINT_DIR, the chief saves model,
optimizer and step count there (`tf.train.CheckpointManager`) every
CHECKPOINT_EVERY_STEPS steps, and at start restores the newest one and trains
only the steps still missing to STEPS. It prints `resumed from step N` or
`starting from step 0`. Files are written and read by the chief itself (the
variables live on the ps, whose disk is not the chief's). Without
CHECKPOINT_DIR nothing is saved.

Curves: every CHECKPOINT_EVERY_STEPS steps the chief prints
`TFJOB_METRIC {"step", "loss", "accuracy"}` (the last step's training loss and
the accuracy on the test split), which the TFJob view and
`tshell status --watch` show (docs/pod-protocol.md, "Metrics while training").
The chief also writes them as `tf.summary` scalars `loss` and `accuracy` by
step into TENSORBOARD_DIR (set by the platform for every replica, copied to
S3) for TensorBoard; without TENSORBOARD_DIR nothing is written.
"""

import json
import os
import time

import numpy as np
import tensorflow as tf

STEPS = int(os.environ.get("STEPS", "400"))
GLOBAL_BATCH_SIZE = 64
LEARNING_RATE = 0.003
HIDDEN_UNITS = 64
SEED = 7
CHECKPOINT_EVERY_STEPS = 100  # a restart repeats at most this many steps
CHECKPOINTS_KEPT = 2
# Checkpoint files go through the chief's filesystem, not through the ps hosting
# the variables: only the model owner's CHECKPOINT_DIR is copied and restored.
CHECKPOINT_OPTIONS = tf.train.CheckpointOptions(
    experimental_io_device="/job:chief/replica:0/task:0/device:CPU:0"
)


def load_digits(data_dir):
    with np.load(os.path.join(data_dir, "digits.npz")) as data:
        return data["x_train"], data["y_train"], data["x_test"], data["y_test"]


def write_metrics(path, metrics):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as out:
        json.dump(metrics, out)


def open_summary_writer():
    """tf.summary's writer on TENSORBOARD_DIR; one that writes nothing when it is unset."""
    tensorboard_dir = os.environ.get("TENSORBOARD_DIR")
    if tensorboard_dir:
        return tf.summary.create_file_writer(tensorboard_dir)
    return tf.summary.create_noop_writer()


def report_metric(writer, step, loss, accuracy):
    point = {"step": step, "loss": round(loss, 5), "accuracy": round(accuracy, 5)}
    print("TFJOB_METRIC " + json.dumps(point), flush=True)
    with writer.as_default(step=step):
        tf.summary.scalar("loss", loss)
        tf.summary.scalar("accuracy", accuracy)
    writer.flush()


def serve_forever(resolver):
    """ps and workers: host variables / run steps for the chief until killed."""
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol="grpc",
        start=True,
    )
    print(f"{resolver.task_type} {resolver.task_id} serving at {server.target}", flush=True)
    server.join()


def build_model():
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(64,)),
            tf.keras.layers.Dense(HIDDEN_UNITS, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )


def restore_latest_checkpoint(manager, step):
    """Restore the newest checkpoint in the manager's directory; return its step (0: none)."""
    if manager is None or manager.latest_checkpoint is None:
        return 0
    manager.checkpoint.restore(
        manager.latest_checkpoint, options=CHECKPOINT_OPTIONS
    ).assert_existing_objects_matched()
    return int(step.numpy())


def run_chief(resolver):
    data_dir = os.environ.get("DATA_DIR", "../data")
    model_dir = os.environ.get("MODEL_DIR", "../model")
    metrics_file = os.environ.get("METRICS_FILE", os.path.join(model_dir, "..", "metrics.json"))
    checkpoint_dir = os.environ.get("CHECKPOINT_DIR")
    x_train, y_train, x_test, y_test = load_digits(data_dir)

    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        tf.keras.utils.set_random_seed(SEED)
        model = build_model()
        optimizer = tf.keras.optimizers.Adam(LEARNING_RATE)
        # Built here rather than at the first step, so that a restore has its slots to fill.
        optimizer.build(model.trainable_variables)
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="none"
        )
    step = tf.Variable(0, dtype=tf.int64, trainable=False)  # steps done, on the chief
    manager = None
    if checkpoint_dir:
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
        manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, CHECKPOINTS_KEPT)
    done = restore_latest_checkpoint(manager, step)
    print(f"resumed from step {done}" if done else "starting from step 0", flush=True)

    def dataset_fn(_input_context=None):
        return (
            tf.data.Dataset.from_tensor_slices((x_train, y_train))
            .shuffle(len(x_train), seed=SEED)
            .repeat()
            .batch(GLOBAL_BATCH_SIZE)
        )

    per_worker_dataset = coordinator.create_per_worker_dataset(dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)

    @tf.function
    def train_step(iterator):
        def step_fn(features, labels):
            with tf.GradientTape() as tape:
                logits = model(features, training=True)
                loss = tf.nn.compute_average_loss(
                    loss_object(labels, logits), global_batch_size=GLOBAL_BATCH_SIZE
                )
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            return loss

        features, labels = next(iterator)
        return strategy.run(step_fn, args=(features, labels))

    writer = open_summary_writer()
    started = time.monotonic()
    while done < STEPS:
        # A point of the curves (and a checkpoint) per chunk; the coordinator joins each.
        chunk = min(STEPS - done, CHECKPOINT_EVERY_STEPS)
        for _ in range(chunk):
            last_loss = coordinator.schedule(train_step, args=(per_worker_iterator,))
        coordinator.join()
        done += chunk
        logits = model(x_test, training=False)
        report_metric(
            writer,
            done,
            float(last_loss.fetch()),
            float(np.mean(np.argmax(logits.numpy(), axis=1) == y_test)),
        )
        if manager:
            step.assign(done)
            # Named by the step (ckpt-150): the platform reads it from the `checkpoint` file.
            manager.save(checkpoint_number=done, options=CHECKPOINT_OPTIONS)
    train_seconds = time.monotonic() - started

    logits = model(x_test, training=False)
    loss = float(tf.reduce_mean(loss_object(y_test, logits)))
    accuracy = float(np.mean(np.argmax(logits.numpy(), axis=1) == y_test))

    os.makedirs(model_dir, exist_ok=True)
    model.save(os.path.join(model_dir, "digits.keras"))
    metrics = {
        "accuracy": accuracy,
        "loss": loss,
        "steps": STEPS,
        "train_seconds": round(train_seconds, 2),
    }
    write_metrics(metrics_file, metrics)
    print(f"test accuracy {accuracy:.4f}, loss {loss:.4f}, {STEPS} steps", flush=True)


def main():
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        serve_forever(resolver)
    elif resolver.task_type == "chief":
        run_chief(resolver)
    else:
        raise SystemExit(
            f"TF_CONFIG task.type {resolver.task_type!r} given; "
            "this program runs as chief, ps or worker"
        )


if __name__ == "__main__":
    main()
