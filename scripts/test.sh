#!/usr/bin/env bash
# Set up (editable install with the test and torch extras) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[test,torch]"
python3 -m pytest "$@"
