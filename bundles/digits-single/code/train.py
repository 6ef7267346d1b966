"""digits-single: a single-node Keras classifier for scikit-learn's 8x8 digits.

The simplest TF-on-K8s program: one replica, no TF_CONFIG needed, plain
`model.fit`. It reads the platform's environment (see docs/examples.md):
DATA_DIR (holds digits.npz), MODEL_DIR (where the model goes), METRICS_FILE
(a JSON file with accuracy, loss and steps). Defaults let it run by hand
from the bundle's code/ folder.

Summaries: Keras' own `TensorBoard` callback writes the epochs' loss and
accuracy (tags `epoch_loss`, `epoch_accuracy`) into TENSORBOARD_DIR, which the
platform sets for every replica and copies to S3; run by hand without it,
nothing is written.
"""

import json
import os
import time

import numpy as np
import tensorflow as tf

EPOCHS = int(os.environ.get("EPOCHS", "10"))
BATCH_SIZE = 32
LEARNING_RATE = 0.003
SEED = 7


def load_digits(data_dir):
    with np.load(os.path.join(data_dir, "digits.npz")) as data:
        return data["x_train"], data["y_train"], data["x_test"], data["y_test"]


def build_model():
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(64,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=tf.keras.optimizers.Adam(LEARNING_RATE),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


class ReportMetrics(tf.keras.callbacks.Callback):
    """A point of the curves per epoch: `TFJOB_METRIC {"step", "epoch", "loss", "accuracy"}`
    (docs/pod-protocol.md, "Metrics while training")."""

    def __init__(self, steps_per_epoch):
        super().__init__()
        self.steps_per_epoch = steps_per_epoch

    def on_epoch_end(self, epoch, logs=None):
        point = {"step": (epoch + 1) * self.steps_per_epoch, "epoch": epoch + 1}
        for name in ("loss", "accuracy"):
            if logs and name in logs:
                point[name] = round(float(logs[name]), 5)
        print("TFJOB_METRIC " + json.dumps(point), flush=True)


def build_callbacks(steps_per_epoch):
    """The curves as the platform reads them, and Keras' TensorBoard callback where
    TENSORBOARD_DIR is set."""
    callbacks = [ReportMetrics(steps_per_epoch)]
    tensorboard_dir = os.environ.get("TENSORBOARD_DIR")
    if tensorboard_dir:
        callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=tensorboard_dir))
    return callbacks


def write_metrics(path, metrics):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as out:
        json.dump(metrics, out)


def main():
    data_dir = os.environ.get("DATA_DIR", "../data")
    model_dir = os.environ.get("MODEL_DIR", "../model")
    metrics_file = os.environ.get("METRICS_FILE", os.path.join(model_dir, "..", "metrics.json"))
    tf.keras.utils.set_random_seed(SEED)

    x_train, y_train, x_test, y_test = load_digits(data_dir)
    model = build_model()
    started = time.monotonic()
    steps_per_epoch = -(-len(x_train) // BATCH_SIZE)
    model.fit(
        x_train,
        y_train,
        epochs=EPOCHS,
        batch_size=BATCH_SIZE,
        verbose=2,
        callbacks=build_callbacks(steps_per_epoch),
    )
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    steps = EPOCHS * -(-len(x_train) // BATCH_SIZE)

    os.makedirs(model_dir, exist_ok=True)
    model.save(os.path.join(model_dir, "digits.keras"))
    metrics = {
        "accuracy": float(accuracy),
        "loss": float(loss),
        "steps": steps,
        "train_seconds": round(time.monotonic() - started, 2),
    }
    write_metrics(metrics_file, metrics)
    print(f"test accuracy {accuracy:.4f}, loss {loss:.4f}, {steps} steps", flush=True)


if __name__ == "__main__":
    main()
