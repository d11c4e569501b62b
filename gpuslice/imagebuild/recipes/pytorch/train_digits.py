"""Train a small PyTorch network on scikit-learn's digits (the data ships with scikit-learn:
no download), on the session's GPU slice when it has a CUDA device, else on its CPUs:

    python /opt/gpuslice/examples/train_digits.py

It prints PyTorch's version, the session's slice, the device and the test accuracy. The
platform's hook caps PyTorch's GPU memory to the slice when torch is imported.
"""

from __future__ import annotations

import os

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main() -> None:
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.25,
                                                        random_state=0)
    xs = torch.tensor(X_train, dtype=torch.float32, device=device)
    ys = torch.tensor(y_train, device=device)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(200):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xs), ys)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        test = torch.tensor(X_test, dtype=torch.float32, device=device)
        predicted = model(test).argmax(dim=1).cpu().numpy()
    print(f"torch {torch.__version__}")
    print(f"slice: {os.environ.get('GPUSLICE_FGPU', '0')} fGPU, "
          f"{os.environ.get('GPUSLICE_CPU', '?')} CPU, device {device}")
    print(f"test accuracy {(predicted == y_test).mean():.3f}")


if __name__ == "__main__":
    main()
