"""The pipeline's one typed config: the schema of every section with its defaults, the files it is
merged from (a pipeline's dataset and tunables, profiles, overlays), and each job's command line.

Three tiers, no overlap: infrastructure from the environment (``LAKE_ROOT``, ``MLFLOW_TRACKING_URI``,
``PIPELINE_MLFLOW_ARTIFACTS``); run parameters from the command line (:mod:`jobs.config.cli`); job
tunables from the config (:mod:`jobs.config.files`). This package imports no stage: the stages
import their settings from it.
"""

from jobs.config.choices import (
    ARROW_MEMORY_POOLS,
    BASELINE_KINDS,
    CALIBRATIONS,
    DATA_PATHS,
    DEFAULT_MODEL,
    EVIDENCE,
    FAMILIES,
    LAUNCHERS,
    LR_SCHEDULES,
    MAX_MMAP_THRESHOLD,
    PRECISIONS,
    PROMOTION_METRICS,
    REALIZED_METRICS,
    VALIDATION_F1,
    XGBOOST_DEFAULTS,
    check_arrow_memory_pool,
    check_mmap_threshold,
)
from jobs.config.cli import (
    RUN_OVERRIDES,
    TRAINING_WINDOW,
    WINDOW_OVERRIDES,
    JobArgs,
    WindowArgs,
    add_overrides,
    apply_overrides,
    job_parser,
    override_json,
    param_schema,
    parse_bool,
    parse_job_args,
    with_empty_days,
)
from jobs.config.dataset import (
    CalendarSpec,
    FeatureSpec,
    FeedCalendar,
    HistorySpec,
    JoinSpec,
    RulesSpec,
    TableLimits,
    TableSpec,
    ValidationSpec,
)
from jobs.config.env import (
    artifact_root,
    dag_id,
    days_ending,
    environment,
    import_object,
    pipeline_name,
    tracking_uri,
)
from jobs.config.files import DEFAULT_CONFIG, ConfigError, load_config, resolved, write_overlay
from jobs.config.pipeline import PipelineConfig
from jobs.config.serving import TRACKING_ENV, DecaySpec, DriftSpec, MonitoringSpec, ScoreSpec, ShiftSpec, TrackingSpec
from jobs.config.training import BaselineSpec, EvaluationSpec, SweepSpec, TrainSpec

__all__ = [
    "ARROW_MEMORY_POOLS", "BASELINE_KINDS", "CALIBRATIONS", "DATA_PATHS", "DEFAULT_CONFIG",
    "DEFAULT_MODEL", "EVIDENCE", "FAMILIES", "LAUNCHERS", "LR_SCHEDULES", "MAX_MMAP_THRESHOLD", "PRECISIONS",
    "PROMOTION_METRICS", "REALIZED_METRICS", "RUN_OVERRIDES", "TRACKING_ENV", "TRAINING_WINDOW", "VALIDATION_F1",
    "WINDOW_OVERRIDES", "XGBOOST_DEFAULTS", "BaselineSpec", "CalendarSpec", "ConfigError", "DecaySpec", "DriftSpec",
    "EvaluationSpec", "FeatureSpec", "FeedCalendar", "HistorySpec", "JobArgs", "JoinSpec", "MonitoringSpec",
    "PipelineConfig", "RulesSpec", "ScoreSpec", "ShiftSpec", "SweepSpec", "TableLimits", "TableSpec", "TrackingSpec",
    "TrainSpec", "ValidationSpec", "WindowArgs",
    "add_overrides", "apply_overrides", "artifact_root", "dag_id", "check_arrow_memory_pool", "check_mmap_threshold",
    "days_ending", "environment", "import_object", "job_parser", "load_config", "override_json", "param_schema",
    "pipeline_name",
    "parse_bool", "parse_job_args", "resolved", "tracking_uri", "with_empty_days", "write_overlay",
]
