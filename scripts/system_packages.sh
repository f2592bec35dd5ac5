#!/usr/bin/env bash
# The Debian packages the deployed-stack and browser tests (and `make airflow`) need besides the
# venv: PostgreSQL (Airflow's and MLflow's backend), Chromium and its WebDriver (the UI test).
# Idempotent and quick when they are installed: apt is asked only for what is missing.
# Run as root (or with sudo on PATH); `make test` and `make airflow` call it through a stamp file.
set -euo pipefail

PACKAGES=(postgresql chromium chromium-driver)

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo > /dev/null; then
  SUDO=(sudo)
else
  echo "system_packages.sh: missing ${missing[*]}; install them as root: apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "==> apt-get install ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
# The package's own cluster (Debian creates and starts one on install) is not used: the tests and
# `make airflow` make throw-away clusters of their own with initdb.
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
