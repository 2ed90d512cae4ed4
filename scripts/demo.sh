#!/usr/bin/env bash
# Set up (editable install) and run the main job: the bundled digits CNN quantised to int8, compiled for the
# default simulated VTA accelerator, run on its held-out set with a report.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e .
python3 -m retarget demo "$@"
