"""One rank of the training benchmark's ``torchrun`` contender: :func:`jobs.training.loop.train_fn`
started by torchrun itself, without TorchDistributor.

:mod:`benchmarks.training` starts it as ``python -m torch.distributed.run --standalone --nnodes=1
--nproc_per_node N -m benchmarks.torchrun_rank JOB RESULT``; ``python -m benchmarks.torchrun_rank --help``
lists its arguments. Rank 0 writes train_fn's result to ``RESULT`` (JSON) when training ends.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    """Run train_fn on the job in ``JOB``; rank 0 writes the result to ``RESULT``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("job", metavar="JOB", type=Path,
                        help="a JSON file of the ranks' jobs.training.rank.RankConfig (RankConfig.to_json)")
    parser.add_argument("result", metavar="RESULT", type=Path, help="the JSON file rank 0 writes train_fn's result to")
    args = parser.parse_args(argv)
    from jobs.training.loop import train_fn
    from jobs.training.rank import RankConfig

    result = train_fn(RankConfig.from_json(args.job.read_text()))
    if os.environ.get("RANK", "0") == "0":
        args.result.write_text(json.dumps(result, default=float))


if __name__ == "__main__":
    main()
