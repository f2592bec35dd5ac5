"""Every program is found the same way: ``APPLICATIONS`` names each stage's ``jobs/<stage>/job.py``,
all of them and nothing else, and the reference of their options covers the same jobs."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_applications_hold_every_job_of_the_tree_and_nothing_else():
    from orchestration.spark_jobs import APPLICATIONS, JOBS_DIR

    in_tree = {path.relative_to(JOBS_DIR).as_posix() for path in JOBS_DIR.glob("*/job.py")}
    named = set(APPLICATIONS.values())
    assert named == in_tree, f"not named: {sorted(in_tree - named)}; not in the tree: {sorted(named - in_tree)}"
    assert all(path.count("/") == 1 and path.endswith("/job.py") for path in named), APPLICATIONS
    assert len(named) == len(APPLICATIONS)  # one name per program


def test_the_options_reference_covers_the_same_jobs():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import config_reference
    finally:
        sys.path.remove(str(REPO / "scripts"))
    from orchestration.spark_jobs import APPLICATIONS

    modules = {job: "jobs." + path.removesuffix(".py").replace("/", ".") for job, path in APPLICATIONS.items()}
    assert config_reference.JOBS == modules
