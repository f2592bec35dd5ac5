"""scripts/env.sh is sourced by make, by scripts/demo.sh and by the tests: it must be idempotent."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _source(times: int) -> dict[str, str]:
    script = " && ".join([f"source {REPO / 'scripts/env.sh'}"] * times) + " && env -0"
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    out = subprocess.run(["bash", "-c", script], env=env, check=True, capture_output=True, text=True).stdout
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def test_sourcing_twice_changes_nothing_but_path():
    once, twice = _source(1), _source(2)
    assert {k: v for k, v in once.items() if k != "PATH"} == {k: v for k, v in twice.items() if k != "PATH"}


def test_spark_connection_is_valid_json_for_a_local_master():
    conn = json.loads(_source(2)["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert conn == {"conn_type": "spark", "host": "local[2]"}


def test_airflow_resolves_the_spark_master_from_the_environment():
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    assert SparkSubmitHook(conn_id="spark_default")._resolve_connection()["master"] == "local[2]"


@pytest.mark.e2e  # a Spark driver in a fresh interpreter of its own: about 10 s
def test_the_spark_ui_listens_on_loopback_only(tmp_path):
    """A job's Spark UI under the local environment accepts no connection from other machines."""
    import socket

    env = {k: v for k, v in _source(1).items() if k != "PIPELINE_HOME"}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = f"""
import os, psutil
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.port", "{port}").getOrCreate()
listening = {{c.laddr.ip.removeprefix("::ffff:") for c in psutil.net_connections("tcp")
             if c.status == "LISTEN" and c.laddr.port == {port}}}
print(sorted(listening))
spark.stop()
"""
    env["PIPELINE_HOME"] = str(tmp_path)
    out = subprocess.run([str(REPO / ".venv/bin/python"), "-c", script], env=env, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    assert out.strip().splitlines()[-1] == "['127.0.0.1']"


def test_the_test_session_keeps_every_jit_tier_and_the_jobs_the_tests_start_stop_at_c1(spark):
    """tests/jit.py: this process's session lives for the run, so its compiler goes to C2 (and it
    collects with the parallel collector); the spark-submits the tests start get C1 only through
    SPARK_SUBMIT_OPTS."""
    from tests import jit

    assert jit.tier(spark.sparkContext._jvm) == 4
    assert sorted(jit.collectors(spark.sparkContext._jvm)) == ["PS MarkSweep", "PS Scavenge"]  # the parallel one
    assert os.environ["SPARK_SUBMIT_OPTS"].split()[-1] == jit.ONE_JOB


def test_the_test_servers_listen_on_ports_no_outgoing_connection_can_be_given(monkeypatch):
    """The stack's servers get ports below the kernel's ephemeral range (an outgoing connection's
    source port comes from that range and took an api-server's port once in CI), each xdist
    worker from a band of its own, never one port twice, none that something listens on."""
    import socket

    from tests import airflow_server

    # a band of ten ports of its own and a memory of its own: this process's stack keeps its band
    monkeypatch.setattr(airflow_server, "PORT_LOW", 31000)
    monkeypatch.setattr(airflow_server, "PORT_BAND", 10)
    monkeypatch.setattr(airflow_server, "_handed_out", set())
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    band = range(31010, 31020)
    with socket.socket() as busy:  # something listens on one port of gw1's band
        taken = next(port for port in band if _bindable(port))
        busy.bind(("127.0.0.1", taken))
        busy.listen()
        free = [port for port in band if port != taken and _bindable(port)]
        ports = [airflow_server._free_port() for _ in free]
        fallback = airflow_server._free_port()  # the band used up: the kernel's choice, still free
    assert sorted(ports) == free and taken not in ports
    assert all(port < airflow_server._ephemeral_low() for port in ports)
    assert fallback not in band and _bindable(fallback)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert airflow_server._free_port() in range(31000, 31010)


def _bindable(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_the_conftest_imported_again_under_another_name_changes_nothing(monkeypatch):
    """``from tests.conftest import ...`` runs the file again as another module: the environment a
    fixture set since stays, and the worker's home is not nested in itself."""
    import importlib
    import sys

    monkeypatch.setenv("LAKE_ROOT", "/a/fixture/s/lake")
    home = os.environ["PIPELINE_TEST_HOME"]
    monkeypatch.delitem(sys.modules, "tests.conftest", raising=False)
    again = importlib.import_module("tests.conftest")
    assert os.environ["LAKE_ROOT"] == "/a/fixture/s/lake" and os.environ["PIPELINE_TEST_HOME"] == home
    assert again.SESSION_HOME == Path(home)
