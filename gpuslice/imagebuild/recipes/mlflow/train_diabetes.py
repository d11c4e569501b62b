"""Train an ElasticNet on scikit-learn's diabetes data and log it to MLflow.

The classic MLflow example, in a session of the mlflow image:

    python /opt/gpuslice/examples/mlflow/train_diabetes.py 0.05 0.5

Each run logs its parameters, metrics and model to ``MLFLOW_TRACKING_URI`` (the image's
default, which the MLflow UI app reads): open "mlflow" in the app launcher, or
``gpuslice app open SESSION mlflow``, to compare runs.
"""

from __future__ import annotations

import sys

import mlflow
import mlflow.sklearn
import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.linear_model import ElasticNet
from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score
from sklearn.model_selection import train_test_split


def main(alpha: float, l1_ratio: float) -> None:
    X, y = load_diabetes(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=42)
    mlflow.set_experiment("diabetes")
    with mlflow.start_run() as run:
        model = ElasticNet(alpha=alpha, l1_ratio=l1_ratio, random_state=42)
        model.fit(X_train, y_train)
        predicted = model.predict(X_test)
        rmse = float(np.sqrt(mean_squared_error(y_test, predicted)))
        mae = float(mean_absolute_error(y_test, predicted))
        r2 = float(r2_score(y_test, predicted))
        mlflow.log_params({"alpha": alpha, "l1_ratio": l1_ratio})
        mlflow.log_metrics({"rmse": rmse, "mae": mae, "r2": r2})
        mlflow.sklearn.log_model(model, name="model", input_example=X_train[:2])
        print(f"ElasticNet(alpha={alpha}, l1_ratio={l1_ratio}): rmse={rmse:.2f} "
              f"mae={mae:.2f} r2={r2:.3f}")
        print(f"run {run.info.run_id} in experiment {run.info.experiment_id}")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 0.05,
         float(sys.argv[2]) if len(sys.argv) > 2 else 0.5)
