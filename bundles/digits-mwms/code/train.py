"""digits-mwms: synchronous data-parallel training with MultiWorkerMirroredStrategy.

Cluster: two workers (TF_CONFIG set by the platform), no ps, no chief. Every
worker runs this same program: each builds a replica of the model, reads its
own shard of the training data, and the gradients are all-reduced every step,
so the replicas stay identical. Keras 3's `model.fit` does not work under this
strategy, hence the custom loop.

All workers exit by themselves when training is done. Worker 0 owns the
result: it saves the model to MODEL_DIR and writes {"accuracy", "loss",
"steps"} to METRICS_FILE; the others only train.

Checkpoints: when the platform sets CHECKPOINT_DIR, every worker restores the
newest checkpoint there at start (model, optimizer, step count; on a restart
the platform has put worker 0's checkpoints into every worker's CHECKPOINT_DIR)
and trains only the steps still missing to STEPS. Every CHECKPOINT_EVERY_STEPS
steps all workers save, as MultiWorkerMirroredStrategy requires: worker 0 into
CHECKPOINT_DIR (`tf.train.CheckpointManager`), the others into a temporary
directory removed at the end. Worker 0 prints `resumed from step N` or
`starting from step 0`. Without CHECKPOINT_DIR nothing is saved.

Summaries: every worker writes the reduced training loss as a `tf.summary`
scalar `loss` by step into its own TENSORBOARD_DIR (set by the platform for
every replica, copied to S3) for TensorBoard; without it nothing is written.

A Kubeflow TFJob's `Master` replica (tfjob-master.yaml) finds `master` in TF_CONFIG, as
TensorFlow 1's Estimator knew it; TensorFlow 2's strategies know only `chief`, so this
program renames it (`adopt_master_as_chief`) before the strategy reads TF_CONFIG.
"""

import json
import os
import shutil
import tempfile
import time

import numpy as np
import tensorflow as tf

STEPS = int(os.environ.get("STEPS", "300"))
GLOBAL_BATCH_SIZE = 64
LEARNING_RATE = 0.003
HIDDEN_UNITS = 64
SEED = 7
CHECKPOINT_EVERY_STEPS = 100  # a restart repeats at most this many steps
REPORT_EVERY_STEPS = 50  # a point of the curves (worker 0 prints it)
CHECKPOINTS_KEPT = 2


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


def build_model():
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(64,)),
            tf.keras.layers.Dense(HIDDEN_UNITS, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )


def is_result_owner(resolver):
    """Worker 0 (or a chief, if the cluster has one) saves the model and metrics."""
    if resolver.task_type is None:  # no TF_CONFIG: one process, run by hand
        return True
    cluster = resolver.cluster_spec().as_dict()
    if "chief" in cluster:
        return resolver.task_type == "chief"
    return resolver.task_type == "worker" and resolver.task_id == 0


def adopt_master_as_chief():
    """TF_CONFIG's `master` (a Kubeflow Master's name) becomes `chief` for TensorFlow 2."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task") or {}
    if "master" not in config.get("cluster", {}):
        return
    print(f"TF_CONFIG: task {task.get('type')} {task.get('index')}, cluster master", flush=True)
    config["cluster"]["chief"] = config["cluster"].pop("master")
    if task.get("type") == "master":
        task["type"] = "chief"
    os.environ["TF_CONFIG"] = json.dumps(config)


def restore_latest_checkpoint(checkpoint, step, checkpoint_dir):
    """Restore the newest checkpoint in `checkpoint_dir`; return its step (0: none)."""
    latest = tf.train.latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
    if latest is None:
        return 0
    checkpoint.restore(latest).assert_existing_objects_matched()
    return int(step.numpy())


def main():
    data_dir = os.environ.get("DATA_DIR", "../data")
    model_dir = os.environ.get("MODEL_DIR", "../model")
    metrics_file = os.environ.get("METRICS_FILE", os.path.join(model_dir, "..", "metrics.json"))
    checkpoint_dir = os.environ.get("CHECKPOINT_DIR")
    x_train, y_train, x_test, y_test = load_digits(data_dir)

    adopt_master_as_chief()
    # The strategy must exist before any other TensorFlow op runs.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    print(
        f"{resolver.task_type} {resolver.task_id}: "
        f"{strategy.num_replicas_in_sync} replicas in sync",
        flush=True,
    )
    is_owner = is_result_owner(resolver)

    with strategy.scope():
        tf.keras.utils.set_random_seed(SEED)  # same initial weights on every worker
        model = build_model()
        optimizer = tf.keras.optimizers.Adam(LEARNING_RATE)
        # Built here rather than at the first step, so that a restore has its slots to fill.
        optimizer.build(model.trainable_variables)
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="none"
        )
    step = tf.Variable(0, dtype=tf.int64, trainable=False)  # steps done, this worker's own
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    done = restore_latest_checkpoint(checkpoint, step, checkpoint_dir)
    if is_owner:
        print(f"resumed from step {done}" if done else "starting from step 0", flush=True)
    manager = None
    if checkpoint_dir:
        # Only worker 0's files are kept; the others must save too, but somewhere private.
        write_dir = checkpoint_dir if is_owner else tempfile.mkdtemp(prefix="checkpoints-")
        manager = tf.train.CheckpointManager(checkpoint, write_dir, CHECKPOINTS_KEPT)

    def dataset_fn(input_context):
        batch_size = input_context.get_per_replica_batch_size(GLOBAL_BATCH_SIZE)
        return (
            tf.data.Dataset.from_tensor_slices((x_train, y_train))
            .shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
            .shuffle(len(x_train), seed=SEED)
            .repeat()
            .batch(batch_size)
        )

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

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
        per_replica_loss = strategy.run(step_fn, args=(features, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)

    writer = open_summary_writer()
    started = time.monotonic()
    while done < STEPS:
        loss = train_step(iterator)
        done += 1
        if done % REPORT_EVERY_STEPS == 0 or done == STEPS:
            with writer.as_default(step=done):
                tf.summary.scalar("loss", loss)
        if is_owner and (done % REPORT_EVERY_STEPS == 0 or done == STEPS):
            # docs/pod-protocol.md, "Metrics while training": the step's loss, summed over
            # the workers as the strategy reduced it.
            point = {"step": done, "loss": round(float(loss), 5)}
            print("TFJOB_METRIC " + json.dumps(point), flush=True)
        if manager and (done % CHECKPOINT_EVERY_STEPS == 0 or done == STEPS):
            step.assign(done)
            # Named by the step (ckpt-150): the platform reads it from the `checkpoint` file.
            manager.save(checkpoint_number=done)
    train_seconds = time.monotonic() - started
    writer.flush()
    if manager and not is_owner:
        shutil.rmtree(manager.directory, ignore_errors=True)

    if not is_owner:
        print("training done; worker 0 writes the model", flush=True)
        return

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


if __name__ == "__main__":
    main()
