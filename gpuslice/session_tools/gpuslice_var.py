"""``gpuslice_var.py --var NAME --into DIR -- SCRIPT [ARGS]``: run a Python script as
``python3 SCRIPT ARGS`` would, then save the object it left in its global variable ``NAME``
into ``DIR``, in its framework's own format: what ``gpuslice run --save-var`` runs.

The lab's old scripts kept their trained model in a variable and never saved it (the old
launcher injected the save); this keeps them unchanged. The script runs in this process as
``__main__`` (so its globals are still here when it ends, ``sys.exit(0)`` included). The
framework is told by the object's type (the modules of its classes), never by importing one:

- PyTorch (a ``torch.nn.Module``): ``NAME.pt`` (the whole model, ``torch.save``) and
  ``NAME.state_dict.pt`` (its weights alone, loadable without the script's classes);
- Keras (a ``keras`` / ``tf.keras`` model): ``NAME.keras`` (``model.save``);
- anything else picklable (scikit-learn...): ``NAME.joblib`` when joblib is loaded already
  (scikit-learn loads it), else ``NAME.pkl``.

Exit codes: the script's; 70 when the script succeeded but nothing could be saved (no such
variable, or it cannot be written), said in one line. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import traceback
import types
from typing import Any

SAVE_FAILED = 70  # as gpuslice-run: the script worked, its result could not be kept
_KERAS = ("keras", "tf_keras", "tensorflow.python.keras", "tensorflow.keras")


class VarError(Exception):
    """The variable cannot be saved; ``str()`` says why, in one line."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuslice_var.py",
                                     description="Run a script, then save one of its variables.")
    parser.add_argument("--var", required=True, help="The script's global variable to save.")
    parser.add_argument("--into", required=True, help="The directory to save it in.")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the script after --")
    code, left = run_script(command[0], command[1:])
    if code != 0:
        return code
    try:
        written = save_variable(left, args.var, args.into)
    except VarError as err:
        return _say(f"--save-var {args.var}: {err}", SAVE_FAILED)
    return _say(f"--save-var {args.var}: saved {_kind(left[args.var])} as "
                f"{', '.join(written)} in {args.into}/", 0)


def run_script(path: str, args: list[str]) -> tuple[int, dict[str, Any]]:
    """Run ``path`` as ``__main__`` with ``args``; its exit code and its globals at the end."""
    module = types.ModuleType("__main__")
    # as python3 SCRIPT makes __main__: no spec, no package (some code looks)
    module.__dict__.update(__file__=path, __builtins__=__builtins__, __spec__=None,
                           __package__=None)
    try:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec")
    except (OSError, SyntaxError) as exc:
        return _say(f"cannot run {path}: {exc}", 2), {}
    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(path))
    sys.modules["__main__"] = module  # pickle finds the script's own classes here
    try:
        exec(code, module.__dict__)
    except SystemExit as ended:
        return _exit_code(ended.code), module.__dict__
    except KeyboardInterrupt:
        return 130, module.__dict__
    except BaseException:  # as python3 SCRIPT would: the traceback, exit code 1
        traceback.print_exc()
        return 1, module.__dict__
    return 0, module.__dict__


def save_variable(left: dict[str, Any], name: str, into: str) -> list[str]:
    """Write ``left[name]`` into directory ``into``; the file names written."""
    if name not in left:
        shown = sorted(k for k in left if not k.startswith("__"))[:12]
        raise VarError(f"the script left no global variable {name!r} (it has: "
                       f"{', '.join(shown) or 'none'}); assign the model to {name} at the "
                       "script's top level")
    value = left[name]
    try:
        os.makedirs(into, exist_ok=True)
        if _is(value, ("torch.",), "Module"):
            return _torch(value, name, into)
        if any(_is(value, (prefix + ".",), "Model") for prefix in _KERAS):
            path = os.path.join(into, f"{name}.keras")
            value.save(path)
            return [os.path.basename(path)]
        return _pickled(value, name, into)
    except VarError:
        raise
    except Exception as exc:  # the framework's own error, in one line
        raise VarError(f"cannot save {_kind(value)}: {type(exc).__name__}: {exc}") from None


def _torch(model: Any, name: str, into: str) -> list[str]:
    torch = sys.modules["torch"]  # loaded: the object is one of its modules
    weights = os.path.join(into, f"{name}.state_dict.pt")
    torch.save(model.state_dict(), weights)
    whole = os.path.join(into, f"{name}.pt")
    try:
        torch.save(model, whole)
    except Exception as exc:  # e.g. a class defined in a closure: the weights still count
        _say(f"--save-var {name}: the whole model cannot be pickled ({exc}); its weights are "
             f"in {os.path.basename(weights)}")
        return [os.path.basename(weights)]
    return [os.path.basename(whole), os.path.basename(weights)]


def _pickled(value: Any, name: str, into: str) -> list[str]:
    joblib = sys.modules.get("joblib")  # never imported here: only when the script did
    if joblib is not None:
        path = os.path.join(into, f"{name}.joblib")
        joblib.dump(value, path)
        return [os.path.basename(path)]
    path = os.path.join(into, f"{name}.pkl")
    try:
        with open(path, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        os.unlink(path)  # never a half-written file left to be saved as the model
        raise
    return [os.path.basename(path)]


def _is(value: Any, modules: tuple[str, ...], class_name: str) -> bool:
    """Whether one of ``value``'s classes is ``class_name`` from a module under ``modules``."""
    return any(cls.__name__ == class_name and (cls.__module__ + ".").startswith(modules)
               for cls in type(value).__mro__)


def _kind(value: Any) -> str:
    cls = type(value)
    return f"a {cls.__module__}.{cls.__qualname__}"


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)  # sys.exit("message"), as Python itself prints it
    return 1


def _say(line: str, code: int = 0) -> int:
    print(f"gpuslice-run: {line}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
