"""One rank of the training benchmark's ``torchrun`` contender: :func:`jobs.training.loop.train_fn`
started by torchrun itself, without TorchDistributor.

Usage::

    python -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node N -m benchmarks.torchrun_rank JOB RESULT

``JOB``: the ranks' :class:`jobs.training.rank.RankConfig` as JSON (:meth:`~jobs.training.rank.RankConfig.to_json`,
as :mod:`benchmarks.training` writes it); rank 0 writes train_fn's
result to ``RESULT`` (JSON) when training ends.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    """Run train_fn on the job in ``argv[0]``; rank 0 writes the result to ``argv[1]``."""
    from jobs.training.loop import train_fn
    from jobs.training.rank import RankConfig

    job_file, result_file = argv if argv is not None else sys.argv[1:]
    result = train_fn(RankConfig.from_json(Path(job_file).read_text()))
    if os.environ.get("RANK", "0") == "0":
        Path(result_file).write_text(json.dumps(result, default=float))


if __name__ == "__main__":
    main()
