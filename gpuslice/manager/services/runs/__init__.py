"""`gpuslice run`: a training script as a batch session (``runs.py``). A run is its session
plus a ``runs`` row (the script, its arguments, its save directory); its model is the one its
session saved. Invariants: a run's code is in its owner's ``runs`` folder, under
``runs/<name>/`` (or ``runs/<name>.<N>/``: its ``code_dir``), before the run is created (the
manager checks the script is there); no run takes a directory an earlier run keeps, so each
run's code and output stay as they ran (each run's model is a new version of its name); at most
one run of a name is not over at a time; the session runs ``gpuslice-run`` around the script,
so its exit code is the script's. A run's duration is the script's own time once its runner
told it (``runs.script_s``, ``POST /agents/me/sessions/<id>/run/saving``, before saving), so
a manager that was down as the script ended never lengthens it; until then, the time since
the session started RUNNING."""
