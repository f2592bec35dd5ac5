"""Rank 0's MLflow logging: straight to MLflow (:class:`DirectLog`), or as files that the process
which launched the ranks forwards to MLflow as they come (:class:`FileLog`, :func:`run_relayed`).

Why a relay: a rank that imports MLflow pays for it before its first step (``import mlflow`` and
its SQLAlchemy store: two to three seconds of a launch on this machine, docs/bench/training.md),
and its plots and model logging (matplotlib, the pyfunc's signature and input example) after its
last. The launching process has all of that imported already. So a rank started by TorchDistributor
or torchrun writes what it would log, in order, as numbered JSON files in ``RankConfig.events_dir``
(params, each epoch's metrics as the epoch ends, the resumed tag), and at the end the trained
weights with what the model's logging needs; the launcher's thread (:class:`Relay`) forwards each
file as it appears, so a run's epochs still show in MLflow while the ranks train, and after the
ranks return it logs the plots and the model itself. The run and the model are the same as rank 0
logging them (a test compares the two). The rank in the job's own process (``train_in_process``)
logs directly: its process has MLflow already.

Each forwarded file is deleted; what a dead launcher left unforwarded is forwarded by the next
attempt before its ranks start (:func:`run_relayed`), so a resumed run still counts every epoch
once. When forwarding fails (the tracking server gone), the relay leaves a stop file and rank 0
stops at its next event, saying why, as it stopped when its own MLflow call failed. Only this
module's :class:`DirectLog` imports MLflow on a rank.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.training.rank import RankConfig

log = logging.getLogger("jobs.training.job")

EVENT_SUFFIX = ".json"  # an event: {"kind": params | metrics | tag | resumed | final, "time": ..., ...}
FINAL_FILE = "final.torch"  # rank 0's trained weights and what logging the model needs (torch.save)
STOP_FILE = "stop.txt"  # the launcher could not forward: rank 0 stops at its next event, saying why
FORWARD_EVERY_S = 0.25


def event_name(number: int) -> str:
    return f"{number:08d}{EVENT_SUFFIX}"


class DirectLog:
    """Rank 0 logging to the MLflow run itself (the active run of its process)."""

    def __init__(self, job: RankConfig) -> None:
        import mlflow

        self.job, self.mlflow = job, mlflow
        mlflow.set_tracking_uri(job.tracking_uri)
        mlflow.start_run(run_id=job.run_id)

    def params(self, values: dict[str, Any]) -> None:
        self.mlflow.log_params(values)

    def metrics(self, values: dict[str, float], step: int | None = None) -> None:
        self.mlflow.log_metrics(values, step=step)

    def resumed(self, epoch: int, metrics: dict[str, float]) -> None:
        log_resumed(self.mlflow.MlflowClient(), self.job.run_id, epoch, metrics)

    def finish(self, net: Any, final: dict[str, Any]) -> str | None:
        """Log the plots and the model; returns the model's URI. The run is left RUNNING: the
        driver finishes it once the model is registered."""
        uri = log_final(self.job, net, final)
        self.mlflow.end_run(status="RUNNING")
        return uri


class FileLog:
    """Rank 0 writing what it would log as numbered files in ``folder`` (``RankConfig.events_dir``),
    which :class:`Relay` forwards; no MLflow in this process."""

    def __init__(self, folder: str) -> None:
        self.folder, self.count = folder, 0

    def _event(self, kind: str, **body: Any) -> None:
        from jobs.lake.storage import read_bytes, write_text

        stop = read_bytes(f"{self.folder}/{STOP_FILE}")
        if stop is not None:  # no point training on: nothing more would reach the run
            raise RuntimeError(f"the launching process stopped the training: {stop.decode(errors='replace')}")
        write_text(f"{self.folder}/{event_name(self.count)}", json.dumps({"kind": kind, "time": time.time(), **body}))
        self.count += 1

    def params(self, values: dict[str, Any]) -> None:
        self._event("params", values={k: str(v) for k, v in values.items()})

    def metrics(self, values: dict[str, float], step: int | None = None) -> None:
        self._event("metrics", values={k: float(v) for k, v in values.items()}, step=step)

    def resumed(self, epoch: int, metrics: dict[str, float]) -> None:
        self._event("resumed", epoch=epoch, metrics={k: float(v) for k, v in metrics.items()})

    def finish(self, net: Any, final: dict[str, Any]) -> str | None:
        """Write the weights (on the CPU) and ``final`` for the launcher to log; no model URI yet."""
        import io

        import torch

        from jobs.lake.storage import write_bytes

        buffer = io.BytesIO()
        torch.save({"state": {k: v.detach().cpu() for k, v in net.state_dict().items()}, **final}, buffer)
        write_bytes(f"{self.folder}/{FINAL_FILE}", buffer.getvalue())
        self._event("final")
        return None


def rank_log(job: RankConfig) -> DirectLog | FileLog:
    """Rank 0's log: files for the launcher to forward when ``job.events_dir`` is set, else MLflow."""
    return FileLog(job.events_dir) if job.events_dir else DirectLog(job)


def log_resumed(client: Any, run_id: str, epoch: int, metrics: dict[str, float],
                timestamp: float | None = None) -> None:
    """Tag a resumed run, and log the last saved epoch's ``metrics`` if the attempt that saved it
    died before logging them (so every epoch is counted once)."""
    client.set_tag(run_id, "resumed_from_epoch", str(epoch))
    logged = {m.step for m in client.get_metric_history(run_id, "train_loss")}
    if epoch - 1 not in logged:
        log_batch(client, run_id, metrics, epoch - 1, timestamp)


def log_batch(client: Any, run_id: str, values: dict[str, float], step: int | None, timestamp: float | None) -> None:
    from mlflow.entities import Metric

    ms = int((timestamp or time.time()) * 1000)
    client.log_batch(run_id, metrics=[Metric(k, float(v), ms, step or 0) for k, v in values.items()], synchronous=True)


def log_final(job: RankConfig, net: Any, final: dict[str, Any]) -> str:
    """Log a trained model to the active run as rank 0 did: the calibration's params and metrics,
    the model's holdout metrics one step past the last epoch, the loss, ROC and calibration plots,
    and the pyfunc. ``final``: ``calibration``, ``history``, ``labels``, ``probabilities`` (the
    calibrated holdout probabilities), ``head`` (the input example), ``metrics``. Returns the
    model's URI."""
    import mlflow
    import numpy as np

    from jobs.model.calibration import record_metrics, record_params
    from jobs.model.tabular import Preprocessor, log_pyfunc
    from jobs.plots import calibration_figure, loss_figure, roc_figure

    calibration, labels, probabilities = final["calibration"], final["labels"], final["probabilities"]
    mlflow.log_params(record_params(calibration))
    mlflow.log_metrics(record_metrics(calibration))
    # one step past the last epoch: the run's latest holdout_* are the logged model's
    mlflow.log_metrics({f"holdout_{k}": v for k, v in final["metrics"].items() if k != "rows"}, step=job.epochs)
    mlflow.log_figure(loss_figure(final["history"]), "plots/loss_curves.png")
    if len(np.unique(labels)) == 2:
        mlflow.log_figure(roc_figure(labels, probabilities), "plots/roc_curve.png")
    mlflow.log_figure(calibration_figure(labels, probabilities), "plots/calibration_curve.png")
    pre = Preprocessor.from_json(job.preprocessor)
    info = log_pyfunc(net.cpu(), pre, job.hyper, final["head"], builder=job.builder, calibration=calibration)
    return info.model_uri


class Relay:
    """The launcher's side: forwards rank 0's files in ``job.events_dir`` to the run, in order, from
    a thread (:meth:`start`, :meth:`stop`), and logs the model from its final file (:meth:`finish`)."""

    def __init__(self, job: RankConfig) -> None:
        from mlflow import MlflowClient

        self.job, self.client = job, MlflowClient(job.tracking_uri)
        self.next, self.final, self.error = 0, False, None  # type: ignore[var-annotated]
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="rank-0-relay", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop the thread and forward what is left (the epochs a failed rank still logged)."""
        self.stopped.set()
        self.thread.join()
        if self.error is None:
            try:
                self.forward()
            except Exception as err:  # noqa: BLE001 - told by check(), after the ranks' own error
                self.error = err

    def check(self) -> None:
        """Raise what stopped the forwarding, if anything did."""
        if self.error is not None:
            raise RuntimeError(self.message()) from self.error

    def _run(self) -> None:
        from jobs.lake.storage import write_text

        while not self.stopped.wait(FORWARD_EVERY_S):
            try:
                self.forward()
            except Exception as err:  # noqa: BLE001 - check() raises it; rank 0 stops at its next event
                self.error = err
                write_text(f"{self.job.events_dir}/{STOP_FILE}", self.message())
                return

    def message(self) -> str:
        return (f"could not forward rank 0's log to MLflow run {self.job.run_id}: "
                f"{type(self.error).__name__}: {self.error}")

    def forward(self, *, leftover: bool = False) -> int:
        """Forward the events that follow the last one forwarded, in order, deleting each; returns
        how many. With ``leftover``: every event a dead attempt's launcher did not forward (its
        final skipped: the new attempt's rank 0 writes its own), and the numbering starts again."""
        from jobs.lake.storage import delete_file, list_files, read_bytes

        done = 0
        for path in list_files(self.job.events_dir, EVENT_SUFFIX):
            if not leftover and path.rsplit("/", 1)[-1] != event_name(self.next):
                break  # not the next one: written in order, so the next is still being written
            event = json.loads(read_bytes(path) or b"{}")
            if not (leftover and event.get("kind") == "final"):
                self.apply(event)
                done += 1
            delete_file(path)
            self.next += 1
        if leftover:
            for name in (FINAL_FILE, STOP_FILE):
                delete_file(f"{self.job.events_dir}/{name}")
            self.next, self.final = 0, False
        return done

    def apply(self, event: dict[str, Any]) -> None:
        kind, run_id = event["kind"], self.job.run_id
        if kind == "params":
            from mlflow.entities import Param

            self.client.log_batch(run_id, params=[Param(k, v) for k, v in event["values"].items()], synchronous=True)
        elif kind == "metrics":
            log_batch(self.client, run_id, event["values"], event.get("step"), event["time"])
        elif kind == "resumed":
            log_resumed(self.client, run_id, event["epoch"], event["metrics"], event["time"])
        elif kind == "final":
            self.final = True
        else:
            raise ValueError(f"rank 0 wrote an event of unknown kind {kind!r}")

    def finish(self, result: dict[str, Any]) -> dict[str, Any]:
        """Rank 0's ``result`` with the model's URI: the weights and what rank 0 wrote for the model,
        logged to the run here (:func:`log_final`). The run is left RUNNING, as rank 0 left it."""
        import io

        import mlflow
        import torch

        from jobs.lake.storage import delete_file, read_bytes
        from jobs.model.tabular import Preprocessor, build_model

        path = f"{self.job.events_dir}/{FINAL_FILE}"
        data = read_bytes(path) if self.final else None
        if data is None:
            raise RuntimeError(f"rank 0 returned without its final event and weights in {self.job.events_dir}")
        final = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
        net = build_model(self.job.builder, Preprocessor.from_json(self.job.preprocessor), self.job.hyper)
        net.load_state_dict(final.pop("state"))
        net.eval()
        mlflow.set_tracking_uri(self.job.tracking_uri)
        mlflow.start_run(run_id=self.job.run_id)
        status = "FAILED"
        try:
            uri = log_final(self.job, net, final)
            status = "RUNNING"  # the driver finishes it once the model is registered
        finally:
            mlflow.end_run(status=status)
        delete_file(path)
        return {**result, "model_uri": uri}


def run_relayed(job: RankConfig, launch: Callable[[RankConfig], dict[str, Any] | None],
                marks: dict[str, float] | None = None) -> dict[str, Any] | None:
    """``launch(job)`` (TorchDistributor, torchrun...) with rank 0 logging through files that this
    process forwards to the run while the ranks train (:class:`Relay`), then the model logged here.
    ``job.events_dir``: where (a fresh temporary folder when None; the train job's is under its
    checkpoints, so a retry finds what a dead attempt left). ``marks`` gets ``ranks_returned``:
    when ``launch`` returned."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rank-events-") as scratch:
        job = job.replace(events_dir=job.events_dir or scratch)
        relay = Relay(job)
        if relay.forward(leftover=True):
            log.info("forwarded to run %s what an earlier attempt's rank 0 logged but its launcher did not",
                     job.run_id)
        relay.start()
        try:
            result = launch(job)
        finally:
            relay.stop()
        if marks is not None:
            marks["ranks_returned"] = time.time()
        relay.check()
        if not result:
            return result
        return result if result.get("model_uri") else relay.finish(result)
