#!/usr/bin/env bash
# Run by Snakemake inside the new environment, from this checkout's envs/ folder (its own path, not
# the copy under .snakemake/): install membench from the checkout. Its dependencies come from
# membench.yaml.
set -euo pipefail
python -m pip install --no-deps -e "$(cd "$(dirname "$0")/.." && pwd)"
