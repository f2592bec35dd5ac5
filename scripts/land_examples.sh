#!/usr/bin/env bash
# Land each bundled pipeline's example data in its lake ($LAKE_ROOT/<name>), the first time only: a
# lake that has a raw zone already is left as it is. What lands a pipeline's data is the command its
# demo.env names (LAND); a pipeline folder without one is skipped, saying so. The compose stack's
# airflow-init runs it after migrating the metadata database, so that every pipeline it serves has
# its data.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${LAKE_ROOT:?LAKE_ROOT is not set: the folder that holds the lakes of every pipeline}"
for folder in pipelines/*/; do
  name="$(basename "$folder")"
  if [ ! -f "$folder/demo.env" ]; then
    echo "==> $name: no demo.env naming the command that lands its data: skipped"
    continue
  fi
  if [ -d "$LAKE_ROOT/$name/raw" ]; then
    echo "==> $name: its lake has a raw zone already: left as it is"
    continue
  fi
  land="$(bash -c 'source "$1" && printf "%s" "${LAND:-}"' _ "$folder/demo.env")"
  if [ -z "$land" ]; then
    echo "==> $name: its demo.env names no LAND command: skipped"
    continue
  fi
  echo "==> $name: landing its example data in $LAKE_ROOT/$name ($land)"
  $land --lake-root "$LAKE_ROOT/$name"
done
