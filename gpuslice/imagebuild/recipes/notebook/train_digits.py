"""Train a small classifier on scikit-learn's digits (the data ships with scikit-learn: no
download), in a session of the notebook image:

    python /opt/gpuslice/examples/train_digits.py

It prints the library's version, the session's slice and the test accuracy.
"""

from __future__ import annotations

import os

import sklearn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier


def main() -> None:
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.25,
                                                        random_state=0)
    model = MLPClassifier(hidden_layer_sizes=(64,), max_iter=300, random_state=0)
    model.fit(X_train, y_train)
    print(f"scikit-learn {sklearn.__version__}")
    print(f"slice: {os.environ.get('GPUSLICE_FGPU', '0')} fGPU, "
          f"{os.environ.get('GPUSLICE_CPU', '?')} CPU, device cpu")
    print(f"test accuracy {model.score(X_test, y_test):.3f}")


if __name__ == "__main__":
    main()
