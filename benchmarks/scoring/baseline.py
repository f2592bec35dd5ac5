"""The baseline the Spark contenders are held against: one process, pyarrow + torch, reading the same
Parquet and writing the same columns partitioned by date; and reading any contender's output back."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import numpy as np

from jobs.config import FeatureSpec
from jobs.lake.layout import PARTITION

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

    from benchmarks.scoring.scales import Scale
    from jobs.model.tabular import Preprocessor
    from jobs.tracking import ModelRef


def date_partitioning() -> Any:
    """Hive partitioning on the date column, typed as a date (as Spark reads and writes it)."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    return pads.partitioning(pa.schema([(PARTITION, pa.date32())]), flavor="hive")


def arrow_dataset(scale: Scale) -> pads.Dataset:
    """The scale's partitions as a pyarrow dataset (``date`` from the folder names, as Spark reads it)."""
    import pyarrow.dataset as pads

    if scale.days is None:
        return pads.dataset(scale.root, format="parquet", partitioning=date_partitioning())
    return pads.dataset(scale.files(), format="parquet", partitioning=date_partitioning(),
                        partition_base_dir=scale.root)


def encode_arrow(pre: Preprocessor, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`Preprocessor.encode` with pyarrow compute: (codes [n, k] int64, z-scores [n, m] float32)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cats = np.zeros((table.num_rows, len(pre.categorical)), dtype=np.int64)
    for j, col in enumerate(pre.categorical):
        index = pc.index_in(table[col].cast(pa.string()), value_set=pa.array(pre.vocab[col], pa.string()))
        cats[:, j] = pc.fill_null(index, -1).to_numpy().astype(np.int64) + 1
    nums = np.zeros((table.num_rows, len(pre.numeric)), dtype=np.float32)
    for j, col in enumerate(pre.numeric):
        values = table[col].cast(pa.float64()).to_numpy()
        z = (values - pre.mean[col]) / pre.std[col]
        nums[:, j] = np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0)
    return cats, nums


def baseline_score(dataset: pads.Dataset, model: Any, spec: FeatureSpec, ref: ModelRef, run_date: dt.date,
                   out: str, batch_size: int, direct: bool = False) -> int:
    """Scan, predict in batches, write the score job's columns partitioned by date; returns the rows.

    ``model`` is the loaded pyfunc: its ``predict`` takes the raw columns (``direct``: the inputs
    are encoded once with pyarrow and its net is called on the tensors).
    """
    import pyarrow as pa
    import pyarrow.dataset as pads
    import torch

    ids = list(dict.fromkeys(spec.id_columns))
    table = dataset.to_table(columns=list(dict.fromkeys([*ids, *spec.inputs, PARTITION])))
    rows = table.num_rows
    if direct:
        inner = model.unwrap_python_model()
        cats, nums = (torch.from_numpy(a) for a in encode_arrow(inner.pre, table))
        with torch.inference_mode():
            parts = [torch.sigmoid(inner.net(cats[i : i + batch_size], nums[i : i + batch_size])).double().numpy()
                     for i in range(0, rows, batch_size)]
    else:
        inputs = table.select(spec.inputs)
        parts = [np.asarray(model.predict(inputs.slice(i, batch_size).to_pandas()), dtype=np.float64)
                 for i in range(0, rows, batch_size)]
    probability = np.concatenate(parts) if parts else np.zeros(0)
    now = dt.datetime.now(dt.UTC)
    output = pa.table({
        **{c: table[c] for c in ids},
        "probability": pa.array(probability, pa.float64()),
        "model_name": pa.repeat(pa.scalar(ref.name, pa.string()), rows),
        "model_version": pa.repeat(pa.scalar(ref.version, pa.string()), rows),
        "model_run_id": pa.repeat(pa.scalar(ref.run_id, pa.string()), rows),
        "run_date": pa.repeat(pa.scalar(run_date, pa.date32()), rows),
        "scored_at": pa.repeat(pa.scalar(now, pa.timestamp("us", tz="UTC")), rows),
        PARTITION: table[PARTITION],
    })
    pads.write_dataset(output, out, format="parquet", partitioning=date_partitioning(),
                       existing_data_behavior="delete_matching", basename_template="part-{i}.parquet")
    return rows


def read_outputs(path: str) -> tuple[int, np.ndarray, list[str]]:
    """(rows, sorted probabilities, column names) of a predictions folder."""
    import pyarrow.dataset as pads

    dataset = pads.dataset(path, format="parquet", partitioning=date_partitioning())
    table = dataset.to_table(columns=["probability"])
    return table.num_rows, np.sort(table["probability"].to_numpy()), sorted(dataset.schema.names)
