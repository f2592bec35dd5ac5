"""The session's settings: what a long-lived driver keeps, when Spark draws its progress bar."""

from __future__ import annotations


def test_a_long_lived_driver_keeps_few_finished_queries(spark):
    """The tests' session (and the shared Connect server, from the same settings) keeps 50 finished
    queries, not Spark's thousand: their plans and metrics filled a worker's 1 GiB heap."""
    from jobs.runtime.connect_server import command
    from jobs.runtime.session import DRIVER_CONF

    conf = spark.sparkContext.getConf()
    assert {key: conf.get(key) for key in DRIVER_CONF} == DRIVER_CONF
    assert int(DRIVER_CONF["spark.sql.ui.retainedExecutions"]) <= 100
    server = command(15002, "local[2]")
    assert all(f"{key}={value}" in server for key, value in DRIVER_CONF.items())


def test_spark_draws_its_console_progress_bar_only_on_a_terminal_and_never_for_the_replay(monkeypatch):
    import io
    import sys

    from jobs.runtime.session import CONSOLE_PROGRESS_ENV, console_conf

    off = {"spark.ui.showConsoleProgress": "false"}

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv(CONSOLE_PROGRESS_ENV, raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert console_conf() == off  # a log file, a test's captured output
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert console_conf() == {}  # a person at a terminal sees the stages go by
    monkeypatch.setenv(CONSOLE_PROGRESS_ENV, "0")  # what the replay sets: its own progress lines only
    assert console_conf() == off
