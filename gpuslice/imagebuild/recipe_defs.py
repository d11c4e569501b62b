"""The image recipes gpuslice knows: name → versions → build arguments, labels and tag.

Pure data and pure functions (no Docker): :func:`plan` turns ``(recipe, version, options)``
into everything a build needs, or an :class:`ImageBuildError` that says what is possible.
The Dockerfiles under ``recipes/<name>/`` stay generic; versions arrive as build arguments
and the image's metadata as labels (``gpuslice.image.*``) given at build time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from gpuslice.common.images import DEFAULT_SESSION_IMAGE, ImageApp, ImageMeta
from gpuslice.imagebuild.rootfs import ImageBuildError

GIB = 1024**3
PYTHON = "3.11"
TENSORBOARD_VERSION = "2.20.0"  # the Debian bookworm base's Python; wheels must exist for it
RECIPE_LABEL = "gpuslice.image"  # which recipe built an image ("base", "scipy", ...)
MATPLOTLIB_VERSION = "3.9.2"
# What the notebook image holds besides JupyterLab: the scipy 1.5.2 image's set (it builds FROM
# it) and matplotlib. The framework images build FROM the notebook image and keep it.
NOTEBOOK_STACK = {"numpy": "2.1.3", "scipy": "1.14.1", "pandas": "2.2.3",
                  "scikit-learn": "1.5.2", "matplotlib": MATPLOTLIB_VERSION}
FRAMEWORK_STACK = {"jupyterlab": "4.2.5", **NOTEBOOK_STACK}


@dataclass(frozen=True, slots=True)
class RecipeVersion:
    """One buildable (or knowingly unbuildable) version of a recipe."""

    version: str
    build_args: dict[str, str]
    frameworks: dict[str, str]
    gpu: bool = False
    min_gpu: int = 0  # milli-fGPU
    min_cpu: int = 500  # milli-cores
    min_mem: int = GIB
    needs_base_image: str = ""  # non-empty: buildable only FROM a user-given base, and why
    title: str = ""  # display name; default: the recipe's title with the version filled in


@dataclass(frozen=True, slots=True)
class Recipe:
    name: str
    description: str
    title: str  # display name; "{version}" is filled in
    versions: tuple[RecipeVersion, ...]
    default: str
    apps: tuple[ImageApp, ...] = ()
    ci: bool = False  # small enough to build in CI
    unavailable: dict[str, str] = field(default_factory=dict)  # version -> why not, what instead
    # Built FROM this recipe's image (name, version) rather than the base: built first if
    # missing. ``--base-image`` still replaces it.
    base_recipe: tuple[str, str] | None = None
    extra_files: tuple[str, ...] = ()  # more files of recipes/<name>/ for the build context

    def find(self, version: str | None) -> RecipeVersion:
        wanted = version or self.default
        for item in self.versions:
            if item.version == wanted:
                return item
        if wanted in self.unavailable:
            raise ImageBuildError(f"{self.name} {wanted}: {self.unavailable[wanted]}")
        known = ", ".join(v.version for v in self.versions)
        raise ImageBuildError(f"{self.name} has no version {wanted!r}; known: {known}")


@dataclass(frozen=True, slots=True)
class RecipeOptions:
    """Build options shared by every recipe (CLI flags)."""

    base_image: str | None = None  # default: the standard gpuslice base (built if missing)
    extra_ca_bundle: Path | None = None
    torch_index_url: str = ""
    force: bool = False


@dataclass(frozen=True, slots=True)
class BuildPlan:
    recipe: str
    version: str
    tag: str
    base_image: str
    context: dict[str, bytes]
    build_args: dict[str, str]
    labels: dict[str, str]


def _scipy(sklearn: str, numpy: str, scipy: str, pandas: str) -> RecipeVersion:
    return RecipeVersion(
        version=sklearn,
        build_args={"SKLEARN_VERSION": sklearn, "NUMPY_VERSION": numpy,
                    "SCIPY_VERSION": scipy, "PANDAS_VERSION": pandas},
        frameworks={"python": PYTHON, "scikit-learn": sklearn, "numpy": numpy,
                    "scipy": scipy, "pandas": pandas},
    )


def _torch(torch: str, vision: str, variant: str) -> RecipeVersion:
    cuda = variant == "cuda"
    return RecipeVersion(
        version=f"{torch}-{variant}",
        build_args={"TORCH_VERSION": torch, "TORCHVISION_VERSION": vision,
                    "TENSORBOARD_VERSION": TENSORBOARD_VERSION},
        frameworks={"python": PYTHON, "torch": torch, "torchvision": vision,
                    "tensorboard": TENSORBOARD_VERSION, **FRAMEWORK_STACK},
        gpu=cuda, min_gpu=500 if cuda else 0, min_cpu=1000, min_mem=4 * GIB if cuda else 2 * GIB,
        title=f"PyTorch {torch} ({'CUDA' if cuda else 'CPU'})",
    )


def _tf(version: str, package: str, *, numpy: str = "", tensorboard: str = "",
        python: str = PYTHON, needs: str = "") -> RecipeVersion:
    stack = {**FRAMEWORK_STACK, "numpy": numpy, "tensorboard": tensorboard} if numpy else {}
    return RecipeVersion(
        version=version,
        build_args={"TF_VERSION": version, "TF_PACKAGE": package, "NUMPY_VERSION": numpy,
                    "TENSORBOARD_VERSION": tensorboard},
        frameworks={"python": python, "tensorflow": version, **stack},
        gpu=True, min_cpu=1000, min_mem=4 * GIB, needs_base_image=needs,
        title=f"TensorFlow {version}" + (" (CUDA)" if "cuda" in package else ""),
    )


JUPYTER = ImageApp(
    "jupyter", "http", 8888,
    command=(
        "jupyter", "lab", "--no-browser", "--ServerApp.ip=0.0.0.0", "--ServerApp.port={port}",
        "--ServerApp.port_retries=0", "--ServerApp.base_url={base_path}",
        "--IdentityProvider.token={token}", "--ServerApp.allow_remote_access=True",
        # Jupyter drops outputs over 1 MB/s by default: a plot or a big table is no flood.
        "--ServerApp.iopub_data_rate_limit=1000000000",
    ),
    base_path=True,
)
# MLflow's UI reads the runs the session logs (MLFLOW_TRACKING_URI, set by the mlflow image).
# The proxy presents itself to apps as localhost:<port>, hence --allowed-hosts.
MLFLOW = ImageApp(
    "mlflow", "http", 5000,
    command=(
        "sh", "-c",
        'store="$MLFLOW_TRACKING_URI"; [ -n "$store" ] || store="sqlite:///$HOME/mlflow.db"; '
        # Served at its own origin's root, the base path is "/": MLflow wants no prefix then.
        'prefix="{base_path}"; prefix="${{prefix%/}}"; '
        "exec mlflow server --host 0.0.0.0 --port {port} --workers 1 "
        '${{prefix:+--static-prefix "$prefix"}} --allowed-hosts "localhost:{port}" '
        '--backend-store-uri "$store" --artifacts-destination "$HOME/mlartifacts"',
    ),
    base_path=True, start_timeout=120,
)
# TensorBoard reads $TENSORBOARD_LOGDIR (a session variable), else ~/runs (PyTorch's
# SummaryWriter writes ./runs): never the whole home, where storage folders are mounted.
TENSORBOARD = ImageApp(
    "tensorboard", "http", 6006,
    command=(
        "sh", "-c",
        'logdir="$TENSORBOARD_LOGDIR"; [ -n "$logdir" ] || logdir="$HOME/runs"; '
        'exec tensorboard --logdir "$logdir" --host 0.0.0.0 --port {port} '
        "--path_prefix {base_path}",
    ),
    base_path=True, start_timeout=90,
)

TF1_REASON = (
    "TensorFlow 1.15 wheels exist only for Python 3.5-3.7, and the Debian bookworm base has "
    f"Python {PYTHON}, which cannot install them. Possible: a TensorFlow 2.x version of this "
    "recipe, or --base-image IMG naming a Python 3.7 image you provide (e.g. from your "
    "registry) with --version 1.15.5"
)

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            name="scipy",
            description="NumPy, SciPy, pandas and scikit-learn (CPU); --version is scikit-learn's",
            title="scikit-learn {version} (CPU)",
            versions=(
                _scipy("1.3.2", numpy="1.26.4", scipy="1.11.4", pandas="2.1.4"),
                _scipy("1.5.2", numpy="2.1.3", scipy="1.14.1", pandas="2.2.3"),
                _scipy("1.6.1", numpy="2.2.6", scipy="1.15.3", pandas="2.2.3"),
            ),
            default="1.5.2",
            ci=True,
        ),
        Recipe(
            name="pytorch",
            description="PyTorch and torchvision; VERSION-cuda (pip's CUDA wheels) or "
            "VERSION-cpu (needs --torch-index: PyTorch's CPU wheel index)",
            title="PyTorch {version}",
            versions=(
                _torch("2.5.1", "0.20.1", "cuda"),
                _torch("2.5.1", "0.20.1", "cpu"),
                _torch("2.4.1", "0.19.1", "cuda"),
                _torch("2.4.1", "0.19.1", "cpu"),
            ),
            default="2.5.1-cuda",
            apps=(TENSORBOARD,),
            base_recipe=("notebook", "4.2.5"),
            extra_files=("train_digits.py",),
        ),
        Recipe(
            name="tensorflow",
            description="TensorFlow 2.x with its CUDA libraries from pip; 1.15 only on a "
            "Python 3.7 base image you give",
            title="TensorFlow {version}",
            versions=(
                # Both want NumPy 1.x (the notebook image has 2.x): pinned, so the label is true.
                _tf("2.17.1", "tensorflow[and-cuda]", numpy="1.26.4", tensorboard="2.17.1"),
                _tf("2.15.1", "tensorflow[and-cuda]", numpy="1.26.4", tensorboard="2.15.2"),
                _tf("1.15.5", "tensorflow", python="3.7", needs=TF1_REASON),
            ),
            default="2.17.1",
            unavailable=dict.fromkeys(("1.15", "1.15.0", "1.15.4"), TF1_REASON),
            apps=(TENSORBOARD,),
            base_recipe=("notebook", "4.2.5"),
            extra_files=("train_digits.py",),
        ),
        Recipe(
            name="notebook",
            description="JupyterLab with the IPython kernel (app jupyter, port 8888), "
            "matplotlib, and the scipy image's NumPy, SciPy, pandas and scikit-learn 1.5.2",
            title="JupyterLab {version}",
            versions=(
                RecipeVersion(
                    version="4.2.5",
                    build_args={"JUPYTERLAB_VERSION": "4.2.5", "IPYKERNEL_VERSION": "6.29.5",
                                "MATPLOTLIB_VERSION": MATPLOTLIB_VERSION},
                    frameworks={"python": PYTHON, "jupyterlab": "4.2.5", "ipykernel": "6.29.5",
                                **NOTEBOOK_STACK},
                ),
            ),
            default="4.2.5",
            apps=(JUPYTER,),
            ci=True,
            base_recipe=("scipy", "1.5.2"),
            extra_files=("train_digits.py",),
        ),
        Recipe(
            name="mlflow",
            description="MLflow and TensorBoard on the notebook image (JupyterLab, matplotlib, "
            "scikit-learn 1.5.2); apps jupyter (port 8888), mlflow (port 5000) and tensorboard "
            "(port 6006); --version is MLflow's",
            title="MLflow {version} with scikit-learn (CPU)",
            versions=(
                RecipeVersion(
                    version="3.5.1",
                    build_args={"MLFLOW_VERSION": "3.5.1",
                                "TENSORBOARD_VERSION": TENSORBOARD_VERSION,
                                "SQLALCHEMY_VERSION": "2.0.44"},
                    frameworks={"python": PYTHON, "mlflow": "3.5.1",
                                "tensorboard": TENSORBOARD_VERSION,
                                "scikit-learn": "1.5.2"},
                ),
            ),
            default="3.5.1",
            apps=(MLFLOW, TENSORBOARD),
            ci=True,
            # FROM notebook: MLflow needs matplotlib, which the notebook image has, so CI's
            # make images downloads it once, not twice.
            base_recipe=("notebook", "4.2.5"),
            extra_files=("train_diabetes.py",),
        ),
    )
}


#: What `make images-ml` builds (scripts/build-images-ml.sh), one at a time: two versions of
#: each framework, FROM the notebook image. PyTorch's -cuda become -cpu when a CPU wheel index
#: is given (GPUSLICE_TORCH_INDEX). The guide's TensorFlow 1.15 and PyTorch 1.7 have no wheels
#: for the base's Python 3.11 (see TF1_REASON; torch 1.7's newest wheels are for Python 3.8).
ML_IMAGES: tuple[tuple[str, str], ...] = (
    ("pytorch", "2.5.1-cuda"), ("pytorch", "2.4.1-cuda"),
    ("tensorflow", "2.17.1"), ("tensorflow", "2.15.1"),
)


def get_recipe(name: str) -> Recipe:
    if name == "base":
        raise ImageBuildError(
            "the base image is built by `gpuslice up` or scripts/build-images.sh"
        )
    try:
        return RECIPES[name]
    except KeyError:
        raise ImageBuildError(
            f"no recipe named {name!r}; known: {', '.join(sorted(RECIPES))}"
        ) from None


def plan(name: str, version: str | None, options: RecipeOptions) -> BuildPlan:
    """Everything needed to build ``name`` at ``version``, or why it cannot be built."""
    recipe = get_recipe(name)
    item = recipe.find(version)
    if item.needs_base_image and not options.base_image:
        raise ImageBuildError(f"{name} {item.version}: {item.needs_base_image}")
    build_args = dict(item.build_args)
    if name == "pytorch":
        if item.version.endswith("-cpu") and not options.torch_index_url:
            raise ImageBuildError(
                f"pytorch {item.version}: the CPU-only torch wheels are not on the pip index "
                "(its Linux wheels are CUDA builds); pass --torch-index with PyTorch's CPU "
                "wheel index URL, or build a -cuda version"
            )
        if item.version.endswith("-cpu"):
            build_args["TORCH_INDEX_URL"] = options.torch_index_url
    base_image = options.base_image or base_of(recipe)
    meta = ImageMeta(
        title=item.title or recipe.title.format(version=item.version),
        frameworks=item.frameworks,
        min_gpu=item.min_gpu, min_cpu=item.min_cpu, min_mem=item.min_mem,
        gpu=item.gpu, apps=recipe.apps,
    )
    return BuildPlan(
        recipe=name,
        version=item.version,
        tag=f"gpuslice/{name}:{item.version}",
        base_image=base_image,
        context=_context(recipe, options),
        build_args={"BASE_IMAGE": base_image, **build_args},
        labels={**meta.to_labels(), RECIPE_LABEL: name},
    )


def base_of(recipe: Recipe) -> str:
    """The image a recipe builds FROM by default: its base recipe's, or the standard base."""
    if recipe.base_recipe is None:
        return DEFAULT_SESSION_IMAGE
    name, version = recipe.base_recipe
    return f"gpuslice/{name}:{version}"


def _context(recipe: Recipe, options: RecipeOptions) -> dict[str, bytes]:
    root = resources.files("gpuslice.imagebuild").joinpath("recipes")
    files = {
        "Dockerfile": root.joinpath(recipe.name, "Dockerfile").read_bytes(),
        "extra-ca.sh": root.joinpath("common", "extra-ca.sh").read_bytes(),
        "extra-ca.crt": _read_optional(options.extra_ca_bundle, "extra CA bundle"),
    }
    for extra in recipe.extra_files:
        files[extra] = root.joinpath(recipe.name, extra).read_bytes()
    return files


def _read_optional(path: Path | None, what: str) -> bytes:
    if path is None:
        return b""
    if not path.is_file():
        raise ImageBuildError(f"{what} {path} does not exist")
    return path.read_bytes()
