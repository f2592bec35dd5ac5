"""The GPU settings a training's Spark asks for, and the discovery script that finds the GPUs."""

from __future__ import annotations

import pytest


def test_gpu_conf_asks_the_driver_in_local_mode_and_one_gpu_per_task_on_a_cluster():
    from jobs.runtime.gpu import GPU_DISCOVERY_SCRIPT, gpu_conf

    local = gpu_conf(local_mode=True, gpus=2)
    assert local == {"spark.driver.resource.gpu.amount": "2",
                     "spark.driver.resource.gpu.discoveryScript": GPU_DISCOVERY_SCRIPT}
    cluster = gpu_conf(local_mode=False, gpus=4)
    assert cluster["spark.executor.resource.gpu.amount"] == "4"
    assert cluster["spark.task.resource.gpu.amount"] == "1"
    assert cluster["spark.executor.resource.gpu.discoveryScript"] == GPU_DISCOVERY_SCRIPT
    with pytest.raises(ValueError, match="at least one GPU"):
        gpu_conf(local_mode=True, gpus=0)


@pytest.mark.parametrize(
    ("smi_output", "addresses"),
    [(None, []), ("0\n", ["0"]), ("0\n1\n 2\n", ["0", "1", "2"]), ("No devices were found\n", [])],
)
def test_gpu_discovery_script_prints_what_spark_expects(tmp_path, smi_output, addresses):
    """The script Spark runs to find GPUs, with an nvidia-smi that prints what a real one would
    (or none at all, as on this machine)."""
    import json
    import os
    import subprocess

    from jobs.runtime.gpu import GPU_DISCOVERY_SCRIPT

    fake = tmp_path / "nvidia-smi"
    if smi_output is not None:
        fake.write_text(f"#!/bin/sh\nprintf '{smi_output}'\n")
        fake.chmod(0o755)
    out = subprocess.run([GPU_DISCOVERY_SCRIPT], env={**os.environ, "NVIDIA_SMI": str(fake)}, capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == {"name": "gpu", "addresses": addresses}
