#!/usr/bin/env bash
# Local stand-ins for the base images of the compose stack, from Debian's packages, for an engine
# without a registry (scripts/base_images.py says how; `--list` shows what the stack needs).
# Run as root: debootstrap makes device files and owners in the root file system it builds.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
exec "$python" "$repo/scripts/base_images.py" "$@"
