#!/usr/bin/env bash
# Set up (editable install with the test and torch extras), check the package layers
# (import-linter's contract in pyproject.toml; docs/architecture.md) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[test,torch]"
lint-imports --no-cache
python3 -m pytest "$@"
