"""Train a small Keras network on scikit-learn's digits (the data ships with scikit-learn: no
download), on the session's GPU slice when TensorFlow sees a GPU, else on its CPUs:

    python /opt/gpuslice/examples/train_digits.py

It prints TensorFlow's version, the session's slice, the device and the test accuracy. The
platform's hook caps TensorFlow's GPU memory to the slice when tensorflow is imported.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no CUDA-library chatter on CPU nodes

import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402


def main() -> None:
    tf.keras.utils.set_random_seed(0)
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.25,
                                                        random_state=0)
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(64,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(optimizer="adam", metrics=["accuracy"],
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(X_train, y_train, epochs=30, batch_size=64, verbose=0)
    _, accuracy = model.evaluate(X_test, y_test, verbose=0)
    device = "gpu" if tf.config.list_logical_devices("GPU") else "cpu"
    print(f"tensorflow {tf.__version__}")
    print(f"slice: {os.environ.get('GPUSLICE_FGPU', '0')} fGPU, "
          f"{os.environ.get('GPUSLICE_CPU', '?')} CPU, device {device}")
    print(f"test accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
