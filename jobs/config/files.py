"""Where a pipeline's config comes from: files merged in a stated order, then checked against the schema.

The order, each layer laid over the ones before it (mappings merge key by key, a list or a value
replaces what was there, ``null`` sets null):

1. the defaults of the schema (:mod:`jobs.config.training`, :mod:`jobs.config.serving`...);
2. the pipeline (``--config`` / ``$PIPELINE_CONFIG``; default: the bundled ``pipelines/flights/``):
   a folder's ``dataset.yaml`` (the dataset's description) then its ``tunables.yaml`` (what the
   pipeline changes); or a file, which either holds both or names the pipeline it changes in a
   ``pipeline:`` key (a path, relative to the file) and lists only what it changes: a
   deployment's own file;
3. profiles, in the order named (``--profile`` / ``$PIPELINE_PROFILES``, comma-separated):
   ``<pipeline>/profiles/<name>.yaml`` when the pipeline has one, else ``jobs/config/profiles/<name>.yaml``;
4. overlays, in the order given (``--overlay`` / ``$PIPELINE_OVERLAYS``, separated by ``:``): a
   deployment's own files, a test's changes.

A mistake in any of them (an unknown section or key, a wrong type, a column no table has) is a
:class:`ConfigError` naming the file, the key's path, the value and what is expected.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from jobs.config.pipeline import PipelineConfig

REPO = Path(__file__).resolve().parents[2]
PIPELINES = REPO / "pipelines"
DEFAULT_CONFIG = PIPELINES / "flights"  # the bundled pipeline: NYC flights 2013
PROFILES = Path(__file__).with_name("profiles")
DATASET_FILE, TUNABLES_FILE = "dataset.yaml", "tunables.yaml"
CONFIG_ENV, PROFILES_ENV, OVERLAYS_ENV = "PIPELINE_CONFIG", "PIPELINE_PROFILES", "PIPELINE_OVERLAYS"
CHANGES = "(changes given in code)"
BASE_KEY = "pipeline"  # in a file given as the pipeline: the pipeline it changes


class ConfigError(ValueError):
    """The config is wrong: no retry can fix it; the message names the file, the key and what to do."""


def pipeline_files(path: str | os.PathLike[str], seen: tuple[Path, ...] = ()) -> list[Path]:
    """The files of a pipeline: a folder's dataset and tunables files, or the file named after the
    files of the pipeline it names in its ``pipeline:`` key."""
    path = Path(path)
    if not path.is_dir():
        if not path.is_file():
            raise ConfigError(f"no pipeline config at {path}: name a pipeline folder (with {DATASET_FILE}) or a "
                              "YAML file")
        base = read_layer(path).get(BASE_KEY)
        if base is None:
            return [path]
        if not isinstance(base, str):
            raise ConfigError(f"{path}: {BASE_KEY}: the path of the pipeline this file changes, got {base!r}")
        if path.resolve() in seen:
            raise ConfigError(f"{path}: {BASE_KEY}: the files name each other in a circle "
                              f"({', '.join(map(str, seen))})")
        return [*pipeline_files(path.parent / base, (*seen, path.resolve())), path]
    if not (path / DATASET_FILE).is_file():
        raise ConfigError(f"{path} is a folder without {DATASET_FILE}: a pipeline folder describes its dataset "
                          f"there (see {DEFAULT_CONFIG / DATASET_FILE})")
    return [path / DATASET_FILE, *([path / TUNABLES_FILE] if (path / TUNABLES_FILE).is_file() else [])]


def profile_file(name: str, pipeline: Path) -> Path:
    """A profile's file: the pipeline folder's own, else the bundled one."""
    for folder in ((pipeline / "profiles") if pipeline.is_dir() else None, PROFILES):
        if folder is not None and (folder / f"{name}.yaml").is_file():
            return folder / f"{name}.yaml"
    known = sorted(p.stem for p in PROFILES.glob("*.yaml"))
    raise ConfigError(f"no profile {name!r}: the bundled ones are {', '.join(known)} ({PROFILES})")


def _names(value: str | Iterable[str] | None, separator: str) -> list[str]:
    if value is None:
        return []
    items = value.split(separator) if isinstance(value, str) else list(value)
    return [item.strip() for item in items if item and item.strip()]


def layers(path: str | os.PathLike[str] | None = None, profiles: str | Iterable[str] | None = None,
           overlays: str | Iterable[str] | None = None) -> tuple[Path, list[Path], list[Path]]:
    """The pipeline's path, its own files (:func:`pipeline_files`), and its profiles' and overlays'
    files, each in the order they are merged."""
    pipeline = Path(path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)
    chosen = profiles if profiles is not None else os.environ.get(PROFILES_ENV)
    given = overlays if overlays is not None else os.environ.get(OVERLAYS_ENV)
    laid = [profile_file(name, pipeline) for name in _names(chosen, ",")]
    return pipeline, pipeline_files(pipeline), laid + [Path(p) for p in _names(given, os.pathsep)]


class _ConfigLoader(yaml.SafeLoader):
    """YAML 1.2's booleans: ``true`` and ``false`` only. YAML 1.1 also reads yes/no/on/off as
    booleans, which would turn a join's ``on:`` key into ``True``."""


_BOOL = "tag:yaml.org,2002:bool"
_ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ConfigLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def load_yaml(text: str) -> Any:
    """A config file's YAML, read with :class:`_ConfigLoader`."""
    return yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader


def read_layer(path: Path) -> dict[str, Any]:
    """One file's mapping (an empty file: nothing)."""
    try:
        raw = load_yaml(path.read_text())
    except FileNotFoundError as err:
        raise ConfigError(f"{path}: no such config file") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a config file is a mapping of sections (train:, score:...), got a "
                          f"{type(raw).__name__}")
    return raw


def merge(into: dict[str, Any], layer: Mapping[str, Any], origin: dict[tuple[str, ...], str], name: str,
          prefix: tuple[str, ...] = ()) -> None:
    """Lay ``layer`` over ``into``: mappings key by key, anything else replaces. ``origin`` records
    which layer set each path last."""
    for key, value in layer.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            merge(into[key], value, origin, name, path)
        else:
            into[key] = _plain(value)
        origin[path] = name


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def load_config(path: str | os.PathLike[str] | None = None, *, profiles: str | Iterable[str] | None = None,
                overlays: str | Iterable[str] | None = None, changes: Mapping[str, Any] | None = None
                ) -> PipelineConfig:
    """The pipeline's config: its files, profiles and overlays merged (see the module), then
    ``changes`` (sections as dicts, from code), checked against the schema."""
    pipeline, own, laid = layers(path, profiles, overlays)
    files = own + laid
    raw: dict[str, Any] = {}
    origin: dict[tuple[str, ...], str] = {}
    for n, file in enumerate(files):
        layer = read_layer(file)
        if BASE_KEY in layer:
            if n >= len(own):
                raise ConfigError(f"{file}: {BASE_KEY}: only the file given as the pipeline (--config) names the "
                                  "pipeline it changes; a profile or an overlay is laid over whatever was chosen")
            layer = {k: v for k, v in layer.items() if k != BASE_KEY}
        merge(raw, layer, origin, str(file))
    if changes:
        merge(raw, changes, origin, CHANGES)
    config = validate(raw, origin, str(pipeline))
    object.__setattr__(config, "source", str(pipeline))
    object.__setattr__(config, "layers", tuple(str(f) for f in files) + ((CHANGES,) if changes else ()))
    return config


ADAPTER = TypeAdapter(PipelineConfig)


def validate(raw: dict[str, Any], origin: dict[tuple[str, ...], str], where: str) -> PipelineConfig:
    """``raw`` checked against the schema; every error names the file that set the key."""
    try:
        return ADAPTER.validate_python(raw)
    except ValidationError as err:
        raise ConfigError(describe(err, origin, where)) from None


def describe(err: ValidationError, origin: dict[tuple[str, ...], str], where: str,
             title: str = "invalid pipeline config", section: tuple[str, ...] = ()) -> str:
    """One line per error: the file, the key's path, what is wrong, the value found. ``section``:
    the path of what was validated, when it is a part of the config (``("train",)``)."""
    lines = []
    for item in err.errors(include_url=False):
        loc = (*section, *(str(part) for part in item["loc"]))
        message = item["msg"].removeprefix("Value error, ")
        kind = item["type"]
        if kind in ("unexpected_keyword_argument", "extra_forbidden"):
            message = (f"unknown key{' (a section)' if len(loc) == 1 else ''}: check its spelling against "
                       "docs/configuration.md")
        elif kind == "missing":
            message = "required, and no file sets it"
        whole = len(loc) == len(section)  # a rule across keys: it names its key first, the input is the whole
        if whole and ":" in message.split(" ", 1)[0]:
            key, _, message = message.partition(": ")
            loc = tuple(key.split("."))
        found = "" if kind in ("missing", "unexpected_keyword_argument", "extra_forbidden") or whole \
            else f" (got {item['input']!r})"
        if kind in ("unexpected_keyword_argument", "extra_forbidden"):
            found = f" (got {loc[-1]!r})"
        key = ".".join(loc) or "(the config)"
        named = whole and loc and message.startswith(f"{key}.")  # the rule's message names its keys itself
        lines.append(f"{_file_of(loc, origin, where)}: {message if named else f'{key}: {message}'}{found}")
    return f"{title}: " + "; ".join(lines) if len(lines) == 1 else \
        f"{title}:\n" + "\n".join(f"  {line}" for line in lines)


def _file_of(loc: tuple[str, ...], origin: dict[tuple[str, ...], str], where: str) -> str:
    """The file that set ``loc`` (or its nearest section that a file set)."""
    for end in range(len(loc), 0, -1):
        if loc[:end] in origin:
            return origin[loc[:end]]
    return where


def write_overlay(path: str | os.PathLike[str], changes: Mapping[str, Any], *,
                  base: str | os.PathLike[str] | None = None) -> Path:
    """Write ``changes`` (sections as dicts) as a file that names its pipeline (``base``, default
    the bundled one) and lists only what it changes, after checking that they load: what a test
    or the replay hands a job with ``--config``."""
    base = Path(base or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG).resolve()
    load_config(base, profiles=(), overlays=(), changes=changes)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({BASE_KEY: str(base), **_plain(changes)}, sort_keys=False))
    return path


def resolved(config: PipelineConfig) -> dict[str, Any]:
    """The config as its jobs see it, every default filled in: what a run logs."""
    import dataclasses

    return {k: v for k, v in dataclasses.asdict(config).items() if k not in ("source", "layers")}
