"""Operating gpuslice on a machine: systemd units (`systemd.py`)."""
