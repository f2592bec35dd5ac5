# One image for every service of the stack: Airflow, the Spark master and workers, MLflow.
# It installs the project exactly as `make install` does, so the jobs, DAGs and pinned versions
# are the ones the tests run. The services run as an unprivileged user; the code stays root's.
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps make \
    && rm -rf /var/lib/apt/lists/*

# A fixed uid, so that what the services wrote on the volumes keeps its owner across rebuilds.
RUN groupadd --gid 50000 pipeline \
    && useradd --uid 50000 --gid pipeline --create-home --home-dir /home/pipeline --shell /bin/bash pipeline

ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PIPELINE_REPO=/opt/pipeline \
    PYTHONUNBUFFERED=1

WORKDIR /opt/pipeline
COPY pyproject.toml README.md ./
COPY jobs ./jobs
COPY pipelines ./pipelines
COPY orchestration ./orchestration
# Where pip finds the wheels and which versions it takes, when given (pip reads these from the
# environment; all unset by default, and pip then uses PyPI). `make compose-up` passes the wheels of
# the project's own .venv, served on the engine's bridge, with PIP_NO_INDEX: the image gets the exact
# versions the tests ran and the CPU build of torch, which PyPI does not carry (its torch==2.13.0 is
# the CUDA build, several GB), and the build downloads nothing (scripts/compose_stack.py).
ARG PIP_FIND_LINKS
ARG PIP_TRUSTED_HOST
ARG PIP_CONSTRAINT
ARG PIP_NO_INDEX
# Each pipeline's packages.txt (what its landing needs) without their dependencies, as make install.
RUN pip install --no-cache-dir -e '.[deploy]' \
    && for packages in pipelines/*/packages.txt; do pip install --no-cache-dir --no-deps -r "$packages" || exit 1; done \
    && ln -s "$(python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')" /opt/spark
# Spark's classes parsed once for every spark-submit of this image (jobs/runtime/class_archive.py;
# SPARK_SUBMIT_OPTS in docker-compose.yml points at it): built here, against these very jars.
RUN python -m jobs.runtime.class_archive --out /usr/local/spark-classes.jsa
COPY dags ./dags
COPY plugins ./plugins
COPY scripts ./scripts

# What the services write, owned by that user: the lake volume, Airflow's home and its task-log
# volume, the Spark workers' application folder. A named volume copies the ownership of the
# folder it is mounted on when it is first created, so these must exist here.
RUN mkdir -p /data /opt/airflow/logs /home/pipeline/spark-work \
    && chown -R pipeline:pipeline /data /opt/airflow /home/pipeline

ENV SPARK_HOME=/opt/spark \
    HOME=/home/pipeline

# Numeric, so that an orchestrator can check that it is not root (Kubernetes' runAsNonRoot).
USER 50000:50000
# Runs the service's command; for Airflow, first writes the admin password from .env.
ENTRYPOINT ["/opt/pipeline/scripts/container_entrypoint.sh"]
