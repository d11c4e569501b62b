#!/usr/bin/env bash
# Build the standard session images if they are missing or out of date:
#   gpuslice/rootfs:bookworm  (debootstrap minbase + python3, imported through the Engine API)
#   gpuslice/base:<version>   (FROM the rootfs: pip, venv, user "work", the framework hook)
# Needs root, debootstrap and a running dockerd. Arguments go to `python -m gpuslice.images`
# (--force, --cache-dir, --mirror, --extra-ca-bundle, --tag).
#
# An extra CA bundle for TLS inside the images defaults to the one this machine's tools are
# told to use (SSL_CERT_FILE), e.g. a TLS-inspecting proxy's; set GPUSLICE_EXTRA_CA_BUNDLE=""
# explicitly to add none (gpuslice.images.base.default_extra_ca_bundle).
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-}"
if [ -z "$python" ]; then
    if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
exec "$python" -m gpuslice.images "$@"
