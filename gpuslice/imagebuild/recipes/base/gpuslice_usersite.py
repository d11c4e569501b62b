"""The user's site-packages on ``sys.path`` from the start, even before it exists.

Python adds ``~/.local/lib/pythonX.Y/site-packages`` only when that directory exists when the
interpreter starts. In a fresh session it does not, so ``%pip install X`` in a notebook (pip
falls back to a user install: the system's site-packages are root's) made the directory and
put X there, and ``import X`` in the same kernel still failed until a restart. Loaded by
``gpuslice-usersite.pth`` from the system's dist-packages, i.e. right after site.py would
have added the user directory, and put where site.py puts it: before the system's packages.
"""

import os
import site
import sys


def _ensure_user_site() -> None:
    if not site.ENABLE_USER_SITE:  # python -s, PYTHONNOUSERSITE: the user said no
        return
    path = site.getusersitepackages()
    if path in sys.path:
        return
    try:
        # Made now, so that the import system sees a directory (it remembers a missing one).
        os.makedirs(path, exist_ok=True)
    except OSError:
        pass  # a read-only home: still on the path, found once pip can make it
    first = next(
        (i for i, p in enumerate(sys.path) if p.endswith(("site-packages", "dist-packages"))),
        len(sys.path),
    )
    sys.path.insert(first, path)


_ensure_user_site()
