"""The pipelines a deployment serves: found in folders, each named, each checked on its own.

Where they are found, the first that is set:

1. ``$PIPELINES_DIR`` (folders separated by ``:``): every sub-folder with a ``dataset.yaml`` is a
   pipeline named after the folder; every ``<name>.yaml`` file there is a deployment's file that
   names the pipeline it changes (``pipeline: ../path``) and lists its changes, served as ``<name>``;
2. ``$PIPELINE_CONFIG``: one pipeline, named after the folder of the pipeline it is or changes;
3. the bundled ``pipelines/`` of this repository.

A pipeline's name prefixes everything it owns in a shared deployment: its DAG ids, its Assets, its
lake (``$LAKE_ROOT/<name>``). Its MLflow experiment and registered model are its config's; two
pipelines naming the same one are refused, both, naming each other. A pipeline whose config does not
load is kept with its error (:attr:`Pipeline.error`), so that the others are served all the same.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from jobs.config.files import CONFIG_ENV, DATASET_FILE, PIPELINES, ConfigError, load_config, pipeline_files
from jobs.config.pipeline import PipelineConfig

PIPELINES_ENV = "PIPELINES_DIR"
NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
NAME_RULE = "a lower-case letter, then lower-case letters, digits or '_' (at most 40)"


@dataclass(frozen=True)
class Pipeline:
    """One pipeline: its ``name`` and ``source`` (its folder, or a deployment's file naming it), and
    ``error``: why its config does not load (empty when it does)."""

    name: str
    source: str
    error: str = ""

    def config(self) -> PipelineConfig:
        """The pipeline's config (its files, then ``$PIPELINE_PROFILES`` and ``$PIPELINE_OVERLAYS``)."""
        if self.error:
            raise ConfigError(self.error)
        return load_config(self.source)

    def lake_root(self, lakes: str) -> str:
        """Where this pipeline's lake is, under ``lakes`` (the deployment's ``$LAKE_ROOT``)."""
        return f"{lakes.rstrip('/')}/{self.name}"


def name_of(source: str | os.PathLike[str]) -> str:
    """The name of a pipeline given as a path: its folder's name, or for a deployment's file the
    folder of the pipeline it changes."""
    path = Path(source)
    if path.is_dir():
        return path.name
    try:
        return pipeline_files(path)[0].parent.name
    except ConfigError:
        return path.stem


def _entries(folder: Path) -> Iterable[tuple[str, Path]]:
    if not folder.is_dir():
        raise ConfigError(f"${PIPELINES_ENV}: {folder} is not a folder: name folders that hold pipeline folders")
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith((".", "_")):
            continue
        if entry.is_dir():
            yield entry.name, entry
        elif entry.suffix in (".yaml", ".yml"):
            yield entry.stem, entry


def _loaded(name: str, source: Path) -> tuple[str, PipelineConfig | None]:
    """Why the pipeline cannot be served ('' when it can), and its config when it loads."""
    if not NAME.fullmatch(name):
        return f"pipeline {name!r} ({source}): a pipeline's name is {NAME_RULE}: rename its folder or file", None
    if source.is_dir() and not (source / DATASET_FILE).is_file():
        return (f"pipeline {name!r}: {source} has no {DATASET_FILE}: a pipeline folder describes its dataset "
                f"there (see {PIPELINES / 'flights' / DATASET_FILE}), or move the folder out of the pipelines' "
                "folder"), None
    try:
        return "", load_config(source)
    except ConfigError as err:
        return f"pipeline {name!r}: {err}", None


def discover(folders: str | None = None, config: str | None = None) -> list[Pipeline]:
    """The pipelines (see the module), sorted by name; those that cannot be served carry their error.
    ``folders`` and ``config`` default to ``$PIPELINES_DIR`` and ``$PIPELINE_CONFIG``."""
    folders = folders if folders is not None else os.environ.get(PIPELINES_ENV, "")
    config = config if config is not None else os.environ.get(CONFIG_ENV, "")
    roots = [Path(f) for f in folders.split(os.pathsep) if f.strip()]
    if roots:
        found = [entry for root in roots for entry in _entries(root)]
    elif config:
        found = [(name_of(config), Path(config))]
    else:
        found = list(_entries(PIPELINES))
    pipelines: list[Pipeline] = []
    configs: dict[int, PipelineConfig] = {}
    for name, source in found:
        error, config = _loaded(name, source)
        pipelines.append(Pipeline(name, str(source), error))
        if config is not None:
            configs[id(pipelines[-1])] = config
    return sorted(_refuse_collisions(pipelines, configs), key=lambda p: (p.name, p.source))


def _refuse_collisions(pipelines: list[Pipeline], configs: dict[int, PipelineConfig]) -> list[Pipeline]:
    """Two pipelines of one name, or naming one MLflow experiment or registered model: each refused,
    saying which other pipeline it collides with and what to change."""
    owners: dict[tuple[str, str], list[Pipeline]] = {}
    for pipeline in pipelines:
        owners.setdefault(("name", pipeline.name), []).append(pipeline)
        if id(pipeline) in configs:
            train = configs[id(pipeline)].train
            owners.setdefault(("registered model", train.model_name), []).append(pipeline)
            owners.setdefault(("MLflow experiment", train.experiment), []).append(pipeline)
    errors: dict[int, list[str]] = {}
    for (what, value), sharing in owners.items():
        if len(sharing) < 2:
            continue
        for pipeline in sharing:
            others = ", ".join(o.source for o in sharing if o is not pipeline)
            fix = "rename one of the folders or files" if what == "name" else \
                f"give each its own train.{'model_name' if what == 'registered model' else 'experiment'}"
            errors.setdefault(id(pipeline), []).append(
                f"pipeline {pipeline.name!r} ({pipeline.source}) has the {what} {value!r} of {others}: {fix}")
    return [Pipeline(p.name, p.source, p.error or "; ".join(errors[id(p)])) if id(p) in errors else p
            for p in pipelines]


def find(name: str, pipelines: list[Pipeline] | None = None) -> Pipeline:
    """The pipeline called ``name``; a :class:`ConfigError` listing the known ones when none is."""
    found = pipelines if pipelines is not None else discover()
    for pipeline in found:
        if pipeline.name == name:
            return pipeline
    raise ConfigError(f"no pipeline {name!r}: the pipelines found are {', '.join(p.name for p in found) or 'none'} "
                      f"(${PIPELINES_ENV}, ${CONFIG_ENV}, or the bundled {PIPELINES})")
