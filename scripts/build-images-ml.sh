#!/usr/bin/env bash
# Build the framework images (`make images-ml`; not in CI: GBs of wheels each), one at a time,
# each FROM gpuslice/notebook (JupyterLab, NumPy, SciPy, pandas, matplotlib, scikit-learn),
# which is built first when missing, like everything under it:
#   gpuslice/pytorch:2.5.1-cuda, gpuslice/pytorch:2.4.1-cuda   (torch + torchvision + TensorBoard)
#   gpuslice/tensorflow:2.17.1, gpuslice/tensorflow:2.15.1     (tensorflow[and-cuda] + TensorBoard)
# The list is gpuslice.imagebuild.recipe_defs.ML_IMAGES. Up-to-date images are not rebuilt
# (their recipe digest), so a second run takes seconds.
# GPUSLICE_TORCH_INDEX: PyTorch's CPU wheel index URL; given, the PyTorch images are the -cpu
# variants (CPU-only wheels, ~1 GB instead of ~6 GB) built with --torch-index.
# Each build prints one timed line at its end: "<tag>: <seconds> s, <size> MB".
# Other arguments go to every `gpuslice image build` (--force, --extra-ca-bundle).
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-}"
if [ -z "$python" ]; then
    if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
images=$("$python" -c 'from gpuslice.imagebuild.recipe_defs import ML_IMAGES
print(" ".join(f"{r}:{v}" for r, v in ML_IMAGES))')
for image in $images; do
    recipe="${image%%:*}" version="${image#*:}"
    extra=()
    if [ "$recipe" = pytorch ] && [ -n "${GPUSLICE_TORCH_INDEX:-}" ]; then
        version="${version%-cuda}-cpu"
        extra=(--torch-index "$GPUSLICE_TORCH_INDEX")
    fi
    started=$(date +%s)
    "$python" -m gpuslice.cli.main image build "$recipe" --version "$version" "${extra[@]}" "$@"
    size=$("$python" -c 'import asyncio, sys, aiodocker
async def size(tag):
    async with aiodocker.Docker() as docker:
        return (await docker.images.inspect(tag))["Size"]
print(round(asyncio.run(size(sys.argv[1])) / 1e6))' "gpuslice/$recipe:$version")
    echo "gpuslice/$recipe:$version: $(( $(date +%s) - started )) s, $size MB"
done
