#!/usr/bin/env bash
# Build the standard session images if they are missing or out of date:
#   gpuslice/rootfs:bookworm  (debootstrap minbase + python3, imported through the Engine API)
#   gpuslice/base:<version>   (FROM the rootfs: pip, venv, user "work", the framework hook)
#   gpuslice/scipy:1.3.2, gpuslice/scipy:1.5.2  (two versions of the light recipe: the platform
#                             tests prove a session of each reports its own version)
#   gpuslice/notebook:4.2.5   (JupyterLab + ipykernel: the proxy tests run a kernel through it)
#   gpuslice/mlflow:3.5.1     (MLflow + TensorBoard FROM scipy 1.5.2: pip adds only their own
#                             packages; the proxy tests log a run and list it, list TensorBoard's)
# Needs root, a running dockerd, and debootstrap unless a registry Debian image can be had
# (GPUSLICE_IMAGE_SOURCE=auto|registry|debootstrap). Arguments go to
# `python -m gpuslice.imagebuild` (--force, --cache-dir, --mirror, --extra-ca-bundle, --tag); the
# scipy builds take the same CA default, so pass a CA bundle as GPUSLICE_EXTRA_CA_BUNDLE for both
# steps to agree.
# GPUSLICE_SCIPY_VERSIONS (space separated; empty for none) overrides the scipy versions;
# GPUSLICE_APP_RECIPES (default "notebook mlflow"; empty for none) the app images.
#
# An extra CA bundle for TLS inside the images defaults to the one this machine's tools are
# told to use (SSL_CERT_FILE), e.g. a TLS-inspecting proxy's; set GPUSLICE_EXTRA_CA_BUNDLE=""
# explicitly to add none (gpuslice.imagebuild.base.default_extra_ca_bundle).
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-}"
if [ -z "$python" ]; then
    if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
"$python" -m gpuslice.imagebuild "$@"
for version in ${GPUSLICE_SCIPY_VERSIONS-1.3.2 1.5.2}; do
    "$python" -m gpuslice.cli.main image build scipy --version "$version"
done
for recipe in ${GPUSLICE_APP_RECIPES-notebook mlflow}; do
    "$python" -m gpuslice.cli.main image build "$recipe"
done
