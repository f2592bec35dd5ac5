"""Rank 0's part of a training: its run log (:class:`Watch`, :func:`open_watch`), each epoch's
evaluation and log (:func:`log_epoch`), the model it keeps, calibrates and logs at the end
(:func:`finish_model`); the holdout's rows and the net's probabilities on them (:class:`HoldoutRows`),
the validation days' rows, the calibration fitted on them, and whether an epoch's score beats the
best so far (``train.keep_best_epoch``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from jobs.training.loop import Trainer
    from jobs.training.rank import RankConfig


@dataclass
class Watch:
    """Rank 0's view of the training: its run log, the holdout and (``train.keep_best_epoch``) the
    validation days' rows."""

    run_log: Any
    holdout: Any
    validation: Any


def open_watch(job: RankConfig, trainer: Trainer, wanted: list[str], pre: Any, device: torch.device,
               precision: str, data_path: str, allocation: dict[str, Any], marks: dict[str, float]) -> Watch:
    """Rank 0's run log (the rank's settings logged), holdout and validation rows; logs the
    holdout's size, or, resuming, what the last attempt saved but died before logging."""
    import time

    import torch

    from jobs.training.relay import rank_log
    from jobs.training.stream import plan_shares, resolve_data_path

    # MLflow itself in the job's own process; files the launcher forwards under TorchDistributor
    # or torchrun (jobs.training.relay), so this rank imports no MLflow
    run_log = rank_log(job)
    marks["log_opened"] = time.time()
    holdout_plan = plan_shares(job.holdout_dirs, 1, job.label)  # all of it
    holdout_path = resolve_data_path(job.data_path, holdout_plan.share_rows[0], job.buffer_rows)
    run_log.params({
        "training_precision": precision,
        "training_device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "training_data_path": data_path, "holdout_data_path": holdout_path,
        **allocation,
    })
    holdout = HoldoutRows(holdout_plan.units, wanted, job.label, pre, device, holdout_path, job.read_batch_rows)
    validation = None
    if job.keep_best_epoch and job.validation_dirs:
        validation = validation_rows(job, wanted, pre, device)
    if trainer.resumed is None:
        run_log.metrics({"holdout_rows": float(len(holdout.labels))})
    else:  # whatever the last attempt saved but died before logging, logged now
        run_log.resumed(trainer.start_epoch, trainer.resumed)
    return Watch(run_log, holdout, validation)


def log_epoch(job: RankConfig, watch: Watch, trainer: Trainer, epoch: int, totals: list[float],
              loop_seconds: float, lr_at: Any) -> None:
    """Rank 0 after an epoch: the holdout metrics, the validation score and the best epoch so far,
    the checkpoint (before the log, so a retry logs what this attempt could not), the log."""
    from jobs.metrics import evaluate
    from jobs.training.checkpoints import save_checkpoint

    loss_sum, rows = totals
    net, holdout, validation = trainer.net, watch.holdout, watch.validation
    train_loss = loss_sum / rows
    metrics = evaluate(holdout.labels, holdout.predict(net))
    trainer.history["train"].append(train_loss)
    trainer.history["holdout"].append(metrics["log_loss"])
    logged = {"train_loss": train_loss, "epoch_seconds": loop_seconds,
              **{f"holdout_{k}": v for k, v in metrics.items() if k != "rows"}}
    if epoch == 0:
        logged["train_rows"] = rows  # every labelled row, once
    if lr_at is not None:
        logged["learning_rate"] = lr_at(trainer.steps - 1)  # the epoch's last step's
    if validation is not None:
        chosen = evaluate(validation.labels, validation.predict(net), validation.days)[job.selection_metric]
        logged[f"epoch_validation_{job.selection_metric}"] = chosen
        if improves(job.selection_metric, chosen, trainer.best):
            trainer.best = {"epoch": epoch + 1, "score": chosen,
                            "model": {k: v.detach().clone() for k, v in net.state_dict().items()}}
    if job.checkpoint_dir:
        save_checkpoint(job.checkpoint_dir, {
            "epochs_done": epoch + 1, "model": net.state_dict(), "optimizer": trainer.optimizer.state_dict(),
            "scaler": trainer.scaler.state_dict() if trainer.scaler is not None else None,
            "history": trainer.history, "metrics": logged, "best": trainer.best,
        })
    watch.run_log.metrics(logged, step=epoch)
    print(
        f"epoch {epoch + 1}/{job.epochs}: train_loss={train_loss:.4f} "
        f"holdout_log_loss={metrics['log_loss']:.4f} holdout_roc_auc={metrics['roc_auc']:.4f}",
        flush=True,
    )


def finish_model(job: RankConfig, watch: Watch, trainer: Trainer, wanted: list[str], pre: Any,
                 device: torch.device) -> dict[str, Any]:
    """Rank 0 after the last epoch: keep the best epoch's net, calibrate it, evaluate it and log it;
    returns the logged model's URI and its holdout metrics."""
    from jobs.metrics import evaluate
    from jobs.model.calibration import apply_scale

    net, holdout, validation, best, epochs = trainer.net, watch.holdout, watch.validation, trainer.best, job.epochs
    if validation is not None:
        kept = best["epoch"] if best is not None else epochs  # no epoch scored (one class): the last
        if kept < epochs:
            net.load_state_dict(best["model"])
        watch.run_log.metrics({"kept_epoch": float(kept)})
        print(f"kept the net of epoch {kept}/{epochs}, the best on the validation days by "
              f"{job.selection_metric}", flush=True)
    calibration = fit_calibration(job, net, wanted, pre, device, validation)
    # The logged model's holdout metrics: the calibrated probabilities, as its pyfunc gives them.
    probabilities = apply_scale(holdout.predict(net), calibration["logit_scale"])
    metrics = evaluate(holdout.labels, probabilities)
    # The plots and the model: logged here, or by the launcher from the weights (FileLog). The run
    # stays RUNNING: the driver finishes it once the model is registered, so a driver that dies in
    # between leaves a run that a retry resumes (no epochs left: it logs and registers the model)
    # instead of a FINISHED run without a version.
    model_uri = watch.run_log.finish(net, {"calibration": calibration, "history": trainer.history,
                                           "labels": holdout.labels, "probabilities": probabilities,
                                           "head": holdout.head, "metrics": metrics})
    return {"model_uri": model_uri, "metrics": metrics}


def fit_calibration(job: RankConfig, net: Any, columns: list[str], pre: Any, device: Any,
                    validation: HoldoutRows | None = None) -> dict[str, Any]:
    """Rank 0's calibration of the trained ``net`` (:func:`jobs.model.calibration.calibrate`) on the
    labelled rows of the validation days (``job.validation_dirs``, or ``validation`` when rank 0
    holds them already), read as the holdout is (:class:`HoldoutRows`: in memory or streamed by their
    size); not read when ``job.calibration`` is ``none`` or there are no validation days."""
    from jobs.model.calibration import calibrate

    if job.calibration == "none" or not job.validation_dirs:
        return calibrate(job.calibration, [], [])
    validation = validation or validation_rows(job, columns, pre, device)
    return calibrate(job.calibration, validation.labels, validation.predict(net))


def validation_rows(job: RankConfig, columns: list[str], pre: Any, device: Any) -> HoldoutRows:
    """The labelled rows of the validation days (``job.validation_dirs``) with each row's day, read as
    the holdout is."""
    from jobs.training.stream import plan_shares, resolve_data_path

    plan = plan_shares(job.validation_dirs, 1, job.label)
    path = resolve_data_path(job.data_path, plan.share_rows[0], job.buffer_rows)
    return HoldoutRows(plan.units, columns, job.label, pre, device, path, job.read_batch_rows, days=True)


def improves(metric: str, score: float, best: dict[str, Any] | None) -> bool:
    """Whether ``score`` (of ``metric``, a promotion metric) beats ``best``'s: a NaN never does,
    anything else beats none; a tie keeps the earlier epoch."""
    import math

    from jobs.metrics import LOWER_IS_BETTER

    if math.isnan(score):
        return False
    if best is None:
        return True
    return score < best["score"] if metric in LOWER_IS_BETTER else score > best["score"]


class HoldoutRows:
    """Rank 0's holdout: its labels, the first rows (the logged model's input example) and the
    model's probabilities on it (:meth:`predict`). ``memory``: encoded once and kept on the
    device; ``stream``: read again at every evaluation, ``batch_rows`` rows of a row group at a
    time, so only the labels and the probabilities (two numbers a row) stay."""

    def __init__(self, units: list[tuple[str, int]], columns: list[str], label: str, pre: Any, device: Any,
                 path: str, batch_rows: int, days: bool = False) -> None:
        import numpy as np
        import torch

        from jobs.lake.layout import partition_of
        from jobs.training.data import labelled_rows, read_units
        from jobs.training.stream import labelled_frames

        def day(uri: str) -> str:
            found = partition_of(uri)
            return found[1].isoformat() if found else ""

        self.units, self.columns, self.label, self.pre, self.device, self.path = (
            units, columns, label, pre, device, path)
        self.batch_rows = batch_rows
        self.inputs: list[torch.Tensor] | None = None
        # Copies, not views: a float column of a frame is a view of the block that holds all its float
        # columns, so a kept label column (or head) would keep every feature of its rows alive. Kept
        # per streamed batch, that was most of the holdout's features (about 270 MiB at 600,000 rows).
        # ``days``: each labelled row's day (its partition's), for the metrics judged per day
        self.days: Any = None
        if path == "memory":
            tables = read_units(units, columns)
            rows = labelled_rows(tables, columns, label)
            self.inputs = [torch.from_numpy(a).to(device) for a in pre.encode(rows)]  # encoded once
            self.labels = rows[label].to_numpy(np.float64, copy=True)
            self.head = rows.head(5).copy()
            if days:
                counts = [int(t.column(label).to_pandas().notna().sum()) for t in tables]
                self.days = np.repeat(np.array([day(uri) for uri, _ in units], dtype=object), counts)
        else:
            labels, found, self.head = [], [], None
            for uri, group in units:
                for frame in labelled_frames(uri, group, columns, label, batch_rows):
                    labels.append(frame[label].to_numpy(np.float64, copy=True))
                    found.append(np.full(len(frame), day(uri), dtype=object))
                    if self.head is None:
                        self.head = frame.head(5).copy()
            self.labels = np.concatenate(labels) if labels else np.zeros(0)
            if days:
                self.days = np.concatenate(found) if found else np.zeros(0, dtype=object)
            if self.head is None:
                self.head = labelled_rows([], columns, label)

    def predict(self, net: Any) -> Any:
        """The probabilities of ``net`` (float64, on the host), in the order of :attr:`labels`."""
        import numpy as np
        import torch

        from jobs.model.tabular import predict_encoded
        from jobs.training.stream import encode_group

        if self.inputs is not None:
            return predict_encoded(net, *self.inputs)
        parts = []
        for uri, group in self.units:
            # Decoded in batches but predicted a row group at once, as always: float32 sums move in
            # their last bits with the batch's size, and the holdout metrics stay those of earlier runs.
            cats, nums, _ = encode_group(self.pre, uri, group, self.columns, self.label, self.batch_rows)
            if len(cats):
                parts.append(predict_encoded(net, torch.from_numpy(cats).to(self.device),
                                             torch.from_numpy(nums).to(self.device)))
        probabilities = np.concatenate(parts) if parts else np.zeros(0)
        if len(probabilities) != len(self.labels):  # the holdout changed between two reads
            from jobs.training.stream import RowGroupReadError

            raise RowGroupReadError(f"the holdout {self.units[0][0]}... held {len(self.labels)} labelled rows and "
                                    f"now {len(probabilities)}: it was rewritten while the training ran")
        return probabilities
