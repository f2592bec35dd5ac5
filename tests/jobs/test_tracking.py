"""MLflow calls through a restart of the tracking server's database, and against a server that is
gone (issue 44 item 5): the bounds ``tracking.*`` states are the ones MLflow's HTTP client keeps."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from jobs.config import TRACKING_ENV, TrackingSpec, load_config


def _use(monkeypatch: pytest.MonkeyPatch, tracking: TrackingSpec) -> None:
    for name, variable in TRACKING_ENV.items():
        monkeypatch.setenv(variable, str(getattr(tracking, name)))


def test_the_stated_waits_are_urllib3s_own():
    """``retry_waits`` is what urllib3's Retry (which MLflow's client builds from the same
    variables) waits before each retry, so ``give_up_after`` is a bound that holds."""
    from urllib3.util.retry import Retry

    tracking = load_config().tracking
    retry = Retry(total=tracking.max_retries, backoff_factor=tracking.backoff_factor, backoff_jitter=0)
    waits = []
    for _ in range(tracking.max_retries):
        retry = retry.increment(method="GET", url="/", error=ConnectionError("refused"))
        waits.append(retry.get_backoff_time())
    assert waits == tracking.retry_waits
    assert sum(waits) >= 30 + 15  # a 30 s database restart, and the server's own reconnect, ridden out
    assert tracking.give_up_after <= 90  # a server that is gone: reported within about a minute


@pytest.mark.e2e
def test_calls_ride_out_a_30_s_database_restart_and_a_gone_server_fails_them_within_the_bound(
        monkeypatch, tmp_path):
    """A real MLflow server on a real PostgreSQL: the database stopped (``pg_ctl stop -m
    immediate``, as a crash) for 30 s while a metric is logged with the default ``tracking.*``: the
    server answers 503 meanwhile and the call returns once the database is back, the metric stored.
    Then the server itself killed: a call fails, after retrying, within ``give_up_after`` (checked
    with fewer retries, to keep the test short)."""
    import mlflow

    from tests.stack import running_mlflow, running_postgres

    tracking = load_config().tracking
    _use(monkeypatch, tracking)
    with running_postgres(tmp_path) as database:
        with running_mlflow(tmp_path / "mlflow", database.create_database("mlflow")) as server:
            client = mlflow.MlflowClient(server.url)
            run = client.create_run(client.create_experiment("restart"))
            client.log_metric(run.info.run_id, "loss", 1.0, step=0)

            assert "server stopped" in database.stop_immediately()
            started = time.monotonic()
            back = threading.Timer(30, lambda: database.start().ready())
            back.start()
            try:
                client.log_metric(run.info.run_id, "loss", 0.5, step=1)  # blocks until the database is back
            finally:
                back.join()
            rode_out = time.monotonic() - started
            assert rode_out >= 30, rode_out  # it did wait for the database
            assert " 503 " in server.log.read_text()  # the server said so meanwhile, and the client retried
            history = client.get_metric_history(run.info.run_id, "loss")
            assert [(m.step, m.value) for m in history] == [(0, 1.0), (1, 0.5)]

            short = replace(tracking, max_retries=4)
            _use(monkeypatch, short)
            server.kill()
            started = time.monotonic()
            with pytest.raises(mlflow.exceptions.MlflowException, match="Max retries exceeded"):
                client.log_metric(run.info.run_id, "loss", 0.25, step=2)
            gave_up = time.monotonic() - started
    assert sum(short.retry_waits) <= gave_up <= short.give_up_after + 5, (gave_up, short.retry_waits)


def test_calls_on_the_way_out_of_a_failure_give_up_within_seconds(monkeypatch):
    """Ending a run as FAILED after an error (the rank's, the train job's): the server may be what
    failed, so those calls retry once, briefly, and the settings in force before come back after."""
    import mlflow

    from jobs.tracking import best_effort_calls

    _use(monkeypatch, load_config().tracking)
    gone = "http://127.0.0.1:9"  # the discard port: nothing listens, connections are refused
    started = time.monotonic()
    with best_effort_calls(), pytest.raises(mlflow.exceptions.MlflowException):
        mlflow.MlflowClient(gone).get_run("0" * 32)
    assert time.monotonic() - started < 5
    from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_MAX_RETRIES

    assert MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == load_config().tracking.max_retries
