# One image for every service of the stack: Airflow, the Spark master and workers, MLflow.
# It installs the project exactly as `make install` does, so the jobs, DAGs and pinned versions
# are the ones the tests run.
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps make \
    && rm -rf /var/lib/apt/lists/*

ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PIPELINE_REPO=/opt/pipeline \
    PYTHONUNBUFFERED=1

WORKDIR /opt/pipeline
COPY pyproject.toml README.md ./
COPY jobs ./jobs
RUN pip install --no-cache-dir -e '.[deploy]' \
    && ln -s "$(python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')" /opt/spark
COPY dags ./dags
COPY plugins ./plugins
COPY scripts ./scripts

ENV SPARK_HOME=/opt/spark
