"""The one packaging rule pyproject.toml cannot state: no wheel (nor sdist) without the browser
terminal's xterm.js. Those files come from npm (`make web`, tools/build-web.sh) into a folder git
ignores; a wheel built without them would install a manager whose terminal page answers 503, so
the build stops and says what to run. Editable installs (`make venv`) need no check: they read
the checkout, where `make web` puts the files later. Everything else is in pyproject.toml.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.errors import SetupError

VENDOR = Path("gpuslice/manager/proxy/static/vendor")
VENDOR_FILES = ("xterm.js", "xterm.css", "addon-fit.js")  # what tools/build-web.sh copies


def check_vendor_assets() -> None:
    """Raise with what to run when a vendor file is missing or empty."""
    missing = [name for name in VENDOR_FILES
               if not (VENDOR / name).is_file() or (VENDOR / name).stat().st_size == 0]
    if missing:
        raise SetupError(
            f"the browser terminal's assets are missing from {VENDOR} ({', '.join(missing)}): "
            "run `make web` (tools/build-web.sh, needs npm) in the checkout, then build again"
        )


class BuildPyWithAssets(build_py):
    def run(self) -> None:
        if not self.editable_mode:
            check_vendor_assets()
        super().run()


class SdistWithAssets(sdist):
    def run(self) -> None:
        check_vendor_assets()
        super().run()


setup(cmdclass={"build_py": BuildPyWithAssets, "sdist": SdistWithAssets})
