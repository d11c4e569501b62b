"""`gpuslice run --save-var model` (``gpuslice_var.py``): the script runs unchanged and the
object it left in ``model`` is saved in its framework's own format.

PyTorch and Keras are not installed here: their branches run against stand-in packages
(``torch`` / ``keras`` whose ``save`` records what it was given), in a fresh interpreter as
the session runs it, as the hook's tests do. scikit-learn is tested for real in its image
(``tests/platform/test_runs_durable.py``)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

from gpuslice.session_tools import TOOLS_DIR

TORCH = {
    "torch/__init__.py": (
        "import json\n"
        "def save(obj, path):\n"
        "    what = obj if isinstance(obj, dict) else {'whole': type(obj).__name__}\n"
        "    open(path, 'w').write(json.dumps(what))\n"),
    "torch/nn/__init__.py": "from torch.nn.modules.module import Module\n",
    "torch/nn/modules/__init__.py": "",
    "torch/nn/modules/module.py": (
        "class Module:\n"
        "    def state_dict(self):\n"
        "        return {'layer.weight': [0.5, 0.25]}\n"),
}
KERAS = {
    "keras/__init__.py": "from keras.src.models.model import Model\n",
    "keras/src/__init__.py": "",
    "keras/src/models/__init__.py": "",
    "keras/src/models/model.py": (
        "class Model:\n"
        "    def save(self, path):\n"
        "        assert path.endswith('.keras'), path\n"
        "        open(path, 'w').write('keras ' + type(self).__name__)\n"),
}
# Importing it fails: the tool must never import a framework the script did not.
TRAP = {"torch/__init__.py": "raise ImportError('gpuslice_var imported torch')\n",
        "keras/__init__.py": "raise ImportError('gpuslice_var imported keras')\n"}


def run(tmp: Path, script: str, standins: dict[str, str], *args: str,
        var: str = "model") -> tuple[int, str]:
    for rel, text in standins.items():
        (tmp / "site" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "site" / rel).write_text(text)
    (tmp / "site").mkdir(exist_ok=True)
    (tmp / "train.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "-u", str(TOOLS_DIR / "gpuslice_var.py"), "--var", var, "--into",
         "output", "--", "train.py", *args],
        cwd=tmp, env={"PYTHONPATH": str(tmp / "site"), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def test_a_torch_module_is_saved_whole_and_as_its_weights(tmp_path: Path) -> None:
    script = ("import sys\nimport torch.nn as nn\nclass Net(nn.Module):\n    pass\n"
              "model = Net()\nprint('trained', sys.argv[1:])\nsys.exit(0)\n")
    code, said = run(tmp_path, script, TORCH, "--epochs", "2")
    assert code == 0, said
    assert "trained ['--epochs', '2']" in said
    assert ("gpuslice-run: --save-var model: saved a __main__.Net as model.pt, "
            "model.state_dict.pt in output/") in said
    out = tmp_path / "output"
    assert json.loads((out / "model.pt").read_text()) == {"whole": "Net"}
    assert json.loads((out / "model.state_dict.pt").read_text()) == {
        "layer.weight": [0.5, 0.25]}


def test_a_keras_model_is_saved_in_the_keras_format(tmp_path: Path) -> None:
    script = "import keras\nclass Small(keras.Model):\n    pass\nmodel = Small()\n"
    code, said = run(tmp_path, script, KERAS)
    assert code == 0, said
    assert (tmp_path / "output" / "model.keras").read_text() == "keras Small"
    assert sorted(p.name for p in (tmp_path / "output").iterdir()) == ["model.keras"]


def test_anything_else_is_pickled_without_importing_a_framework(tmp_path: Path) -> None:
    script = "weights = {'w': [1, 2, 3], 'bias': 0.5}\nclf = weights\n"
    code, said = run(tmp_path, script, TRAP, var="clf")
    assert code == 0, said
    assert "imported" not in said
    with (tmp_path / "output" / "clf.pkl").open("rb") as f:
        assert pickle.load(f) == {"w": [1, 2, 3], "bias": 0.5}


def test_a_missing_variable_or_a_failed_script_saves_nothing(tmp_path: Path) -> None:
    code, said = run(tmp_path, "net = 1\nloss = 0.1\n", {})
    assert code == 70
    assert ("gpuslice-run: --save-var model: the script left no global variable 'model' (it "
            "has: loss, net); assign the model to model at the script's top level") in said
    assert not (tmp_path / "output").exists()
    code, said = run(tmp_path, "model = 1\nraise SystemExit(3)\n", {})
    assert code == 3 and not (tmp_path / "output").exists()
    code, said = run(tmp_path, "model = 1\n1 / 0\n", {})
    assert code == 1 and "ZeroDivisionError" in said and "Traceback" in said
    assert not (tmp_path / "output").exists()
