"""gpuslice session start-up: install the framework slice hook, then the image's own
``sitecustomize`` (this file shadows it, being first on ``PYTHONPATH``)."""

try:
    import gpuslice_hook
except Exception:  # an unreadable hook must not stop the interpreter
    gpuslice_hook = None

if gpuslice_hook is not None:
    gpuslice_hook.install()
    gpuslice_hook.chain_sitecustomize(__file__)
