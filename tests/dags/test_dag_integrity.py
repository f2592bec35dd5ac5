"""Every DAG loads, follows the house rules, and wires the task graph its pipeline promises: one
writer per lake zone, every Asset a DAG updates is one another DAG runs on, every knob a param the
job understands."""

from __future__ import annotations

from pathlib import Path

import pytest

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"

# Each stage's task graph, the same for every pipeline.
STAGE_EDGES = {
    "ingest": {("wait_for_raw", "validate_raw"), ("validate_raw", "build_features"),
               ("build_features", "publish_features")},
    "train": {("plan_training", "train_baselines"), ("plan_training", "plan_sweep"),
              ("plan_sweep", "train_candidate"), ("plan_sweep", "select_candidate"),
              ("train_candidate", "select_candidate"), ("plan_training", "promote_candidate"),
              ("select_candidate", "promote_candidate"), ("train_baselines", "promote_candidate"),
              ("plan_training", "publish_champion"), ("promote_candidate", "publish_champion"),
              ("promote_candidate", "approve_champion"), ("approve_champion", "publish_champion")},
    "score": {("plan_scoring", "score_batch"), ("plan_scoring", "check_drift"),
              ("score_batch", "check_drift"), ("plan_scoring", "monitor_day"),
              ("score_batch", "monitor_day"), ("plan_scoring", "check_decay"),
              ("monitor_day", "check_decay"), ("plan_scoring", "promote_challenger"),
              ("monitor_day", "promote_challenger")},
}
# The Spark jobs each stage runs: validate and features (the writers of validated/ and features/)
# belong to ingest alone.
STAGE_JOBS = {"ingest": {"validate", "features"}, "train": {"train", "baselines", "promote"},
              "score": {"score", "monitor"}}
# Worker tasks that update Assets: (stage, task) -> the Assets, each named after its pipeline.
STAGE_OUTLETS = {
    ("ingest", "publish_features"): {"features"},
    ("score", "check_drift"): {"scoring_drift"},
    ("score", "check_decay"): {"model_decay"},
    ("score", "promote_challenger"): {"champion_model"},  # promotion_evidence: live
    ("train", "publish_champion"): {"champion_model"},
}
STAGE_SCHEDULED_ON = {"score": {"features", "champion_model"}, "train": {"scoring_drift", "model_decay"}}


def _bundled() -> list[str]:
    """The pipelines of the repository's pipelines/ folder: every one of them gets the DAGs below."""
    from jobs.config.files import PIPELINES

    return sorted(p.parent.name for p in PIPELINES.glob("*/dataset.yaml"))


BUNDLED = _bundled()
EXPECTED_EDGES = {f"{name}_{stage}": edges for name in BUNDLED for stage, edges in STAGE_EDGES.items()}
SPARK_JOBS = {f"{name}_{stage}": jobs for name in BUNDLED for stage, jobs in STAGE_JOBS.items()}
OUTLETS = {(f"{name}_{stage}", task): {f"{name}_{asset}" for asset in assets}
           for name in BUNDLED for (stage, task), assets in STAGE_OUTLETS.items()}
SCHEDULED_ON = {f"{name}_{stage}": {f"{name}_{asset}" for asset in assets}
                for name in BUNDLED for stage, assets in STAGE_SCHEDULED_ON.items()}


@pytest.fixture(scope="module")
def dag_bag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS_DIR))


def test_no_import_errors(dag_bag):
    assert dag_bag.import_errors == {}
    assert {"flights", "bikeshare"} <= set(BUNDLED), "both examples are served"


def test_every_pipeline_s_dags_come_from_the_one_file_named_after_the_pipeline_and_stage(dag_bag):
    assert set(dag_bag.dag_ids) == set(EXPECTED_EDGES)
    for dag_id in dag_bag.dag_ids:
        assert Path(dag_bag.dags[dag_id].fileloc).name == "pipeline_dags.py"
        assert f"pipeline:{dag_id.rsplit('_', 1)[0]}" in dag_bag.dags[dag_id].tags
    assert [p.name for p in DAGS_DIR.glob("*.py")] == ["pipeline_dags.py"], "dags/ holds no pipeline's own file"


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_EDGES))
def test_house_rules(dag_bag, dag_id):
    dag = dag_bag.dags[dag_id]
    assert dag.tags, "every DAG has tags"
    assert dag.doc_md and dag.doc_md.strip(), "the module docstring is the DAG's doc_md"
    assert dag.schedule is not None, "an explicit schedule"
    assert dag.catchup is False, "catchup chosen on purpose"
    assert dag.max_active_runs == 1, "two runs of a DAG never write the same partition at once"
    assert "run_date" in dag.params
    for task in dag.tasks:
        assert task.owner and task.owner != "airflow", f"{task.task_id} has an owner"
        assert task.retries >= 2 and task.retry_exponential_backoff, f"{task.task_id} retries with backoff"


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_EDGES))
def test_task_graph(dag_bag, dag_id):
    dag = dag_bag.dags[dag_id]
    edges = {(up, task.task_id) for task in dag.tasks for up in task.upstream_task_ids}
    assert edges == EXPECTED_EDGES[dag_id]


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_EDGES))
def test_one_writer_per_zone_and_every_spark_task_fails_data_errors_without_retry(dag_bag, dag_id):
    from orchestration.spark_jobs import APPLICATIONS, JOBS_DIR, PipelineSparkSubmitOperator

    names = {str(JOBS_DIR / path): job for job, path in APPLICATIONS.items()}
    jobs = set()
    for task in dag_bag.dags[dag_id].tasks:
        operator = getattr(task, "operator_class", type(task))  # a mapped task names its class
        if issubclass(operator, PipelineSparkSubmitOperator):
            application = task.application if hasattr(task, "application") else task.partial_kwargs["application"]
            assert Path(application).is_file()
            jobs.add(names[application])
    assert jobs == SPARK_JOBS[dag_id]


def _asset_names(condition) -> set[str]:
    """The Assets named in a schedule's condition (an Asset, or any/all of conditions)."""
    if hasattr(condition, "objects"):
        return set().union(*(_asset_names(part) for part in condition.objects))
    return {condition.name}


def test_every_asset_a_dag_updates_starts_another_dag(dag_bag):
    outlets = {(dag_id, task.task_id): {a.name for a in task.outlets}
               for dag_id, dag in dag_bag.dags.items() for task in dag.tasks if task.outlets}
    assert outlets == OUTLETS
    conditions = {dag_id: getattr(dag.timetable, "asset_condition", None) for dag_id, dag in dag_bag.dags.items()}
    scheduled = {dag_id: _asset_names(condition) for dag_id, condition in conditions.items() if condition is not None}
    assert scheduled == SCHEDULED_ON
    assert set().union(*OUTLETS.values()) == set().union(*SCHEDULED_ON.values())


def test_training_runs_weekly_or_on_drift(dag_bag):
    from airflow.sdk import AssetOrTimeSchedule

    timetable = dag_bag.dags["flights_train"].timetable
    assert isinstance(timetable, AssetOrTimeSchedule) and timetable.can_be_scheduled


def test_no_connection_access_at_parse_time(monkeypatch):
    """Parsing must not touch connections: make any lookup fail and parse again."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import Connection

    def refuse(*args, **kwargs):
        raise AssertionError("connection looked up at parse time")

    monkeypatch.setattr(Connection, "get", refuse)
    bag = DagBag(dag_folder=str(DAGS_DIR))
    assert bag.import_errors == {}


def _render(args: list, params: dict, dag=None) -> list[str]:
    """The arguments as a run renders them: its params and the DAG's macros (another task's output
    rendered as a stand-in date)."""
    import jinja2

    env = jinja2.Environment()
    env.globals.update(getattr(dag, "user_defined_macros", None) or {})
    return [env.from_string(a).render(params=params) if isinstance(a, str) else "2013-01-28" for a in args]


def test_every_training_param_reaches_the_job_as_the_setting_it_names(dag_bag):
    """Filled in, each param renders to an option the promotion job parses into its config; the
    trigger form validates them by their schema."""
    from jobs.baselines.job import parse_args as baselines_args
    from jobs.config import RUN_OVERRIDES, WINDOW_OVERRIDES
    from jobs.promotion.job import parse_args

    dag = dag_bag.dags["flights_train"]
    values = {"train_days": 14, "max_train_days": 60, "holdout_days": 3, "epochs": 2, "learning_rate": 0.01,
              "weight_decay": 0.01, "lr_schedule": "constant", "keep_best_epoch": True,
              "hyperparameters": {"members": 1}, "num_processes": 1, "use_gpu": True, "local_mode": True,
              "launcher": "torch_distributor", "precision": "bf16", "promotion_metric": "log_loss",
              "promotion_margin": 0.01, "require_approval": True}
    assert set(values) == set(RUN_OVERRIDES)
    assert set(dag.params) - {"run_date", *values} == {"sweep_size", "sweep_learning_rates", "sweep_widths",
                                                        "sweep_depths", "sweep_epochs"}
    for name, value in values.items():
        dag.params.get_param(name).resolve(value)  # valid per the trigger form's schema
    args = _render(dag.get_task("promote_candidate").application_args, values, dag)
    parsed = parse_args(args)
    assert parsed.candidate_run == "2013-01-28"  # the select_candidate output (rendered as a stand-in here)
    train = parsed.config.train
    assert {name: getattr(train, name) for name in values if name != "hyperparameters"} == {
        k: v for k, v in values.items() if k != "hyperparameters"}
    assert train.hyperparameters["members"] == 1 and train.hyperparameters["dropout"] > 0  # over the defaults
    assert parsed.overrides["num_processes"] == 1 and parsed.started_by == "2013-01-28"
    window = baselines_args(_render(dag.get_task("train_baselines").application_args, values, dag)).config.train
    assert {name: getattr(window, name) for name in WINDOW_OVERRIDES} == {n: values[n] for n in WINDOW_OVERRIDES}


def test_training_params_left_empty_keep_the_config(dag_bag, config):
    from jobs.promotion.job import parse_args

    dag = dag_bag.dags["flights_train"]
    parsed = parse_args(_render(dag.get_task("promote_candidate").application_args, dict.fromkeys(dag.params), dag))
    assert parsed.config.train == config.train and parsed.overrides == {}


@pytest.mark.parametrize(("name", "bad"), [("epochs", 0), ("learning_rate", 0), ("precision", "fp8"),
                                           ("promotion_metric", "accuracy"), ("train_days", "7")])
def test_the_trigger_form_refuses_a_bad_value(dag_bag, name, bad):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        dag_bag.dags["flights_train"].params.get_param(name).resolve(bad)


def test_ingest_takes_a_window_the_jobs_understand(dag_bag):
    dag = dag_bag.dags["flights_ingest"]
    assert dag.params.get_param("days").resolve(29) == 29
    for task_id in ("validate_raw", "build_features"):
        args = _render(dag.get_task(task_id).application_args, {"run_date": "2013-01-29", "days": 29})
        assert args[:2] == ["--run-date", "2013-01-29"] and args[args.index("--days") + 1] == "29"


def test_the_sweep_is_mapped_over_as_many_candidates_as_configured(dag_bag, config):
    """train_candidate is mapped over plan_sweep's list: sweep_size MLP candidate configs (the
    config's by default) and one per xgboost param set, each a train-job argument list the job
    parses, under one parent run."""
    from jobs.config import override_json
    from jobs.selection.sweep import candidate_args, candidates
    from jobs.training.job import parse_args
    from orchestration.sweep_tasks import SWEEP_PARAMS

    dag = dag_bag.dags["flights_train"]
    mapped = dag.get_task("train_candidate")
    assert mapped.expand_input.value["application_args"].operator.task_id == "plan_sweep"
    base = {"learning_rate": config.train.learning_rate, "epochs": config.train.epochs,
            "hyperparameters": dict(config.train.hyperparameters)}
    defaults = {key: dag.params[name] for name, key in SWEEP_PARAMS.items()}
    found = candidates(config.sweep, base, defaults)
    assert [c["family"] for c in found] == ["mlp"] * config.sweep.size + ["xgboost"] * len(config.sweep.xgboost)
    assert config.sweep.size == 1 and config.sweep.families == ["mlp", "xgboost"]
    assert config.train.hyperparameters["members"] == 2  # the one MLP candidate: an ensemble
    params = {"sweep_size": 3, "sweep_learning_rates": [0.01, 0.02], "sweep_widths": [16, 8], "sweep_depths": [1],
              "sweep_epochs": [1]}
    # What the DAG's params resolve the values to (a schema that coerced or dropped one would show
    # here) is what plan_sweep gets.
    resolved = {name: dag.params.get_param(name).resolve(value) for name, value in params.items()}
    assert resolved == params
    found = candidates(config.sweep, base, {key: resolved[name] for name, key in SWEEP_PARAMS.items()})
    assert [c["name"] for c in found] == ["lr=0.01,width=16,depth=1,epochs=1", "lr=0.01,width=8,depth=1,epochs=1",
                                          "lr=0.02,width=16,depth=1,epochs=1",
                                          found[3]["name"]]
    assert found[3]["name"] == "xgboost:" + ",".join(f"{k}={config.sweep.xgboost_params()[0][k]}"
                                                     for k in ("n_estimators", "max_depth", "learning_rate"))
    args = ["--run-date", "2013-01-28", "--overrides", override_json({"epochs": 5, "use_gpu": True}),
            *candidate_args(found[1], "parent")]
    parsed = parse_args(args)
    assert parsed.parent_run_id == "parent" and parsed.config.train.epochs == 1  # the candidate's own wins
    assert parsed.config.train.hyperparameters["hidden_units"] == [8] and parsed.config.train.use_gpu is True
    trees = parse_args(["--run-date", "2013-01-28", *candidate_args(found[3], "parent")])
    assert (trees.family, trees.parent_run_id) == ("xgboost", "parent")
    assert trees.xgboost_params == config.sweep.xgboost_params()[0]


def run_states(dag, decided: dict[str, str]) -> dict[str, str]:
    """Every task's state in a run of ``dag`` where the tasks in ``decided`` ended so (their own
    success, skip or failure) and every other task's trigger rule decides whether it runs (and then
    succeeds), upstream first. The rules are Airflow's (airflow/ti_deps/deps/trigger_rule_dep.py)
    for the two the DAGs use; a task with another rule fails this, to be added here."""
    states: dict[str, str] = {}
    for task in dag.topological_sort():
        if task.task_id in decided:
            states[task.task_id] = decided[task.task_id]
            continue
        ups = [states[u] for u in task.upstream_task_ids]
        failed = sum(s in ("failed", "upstream_failed") for s in ups)
        skipped, success = ups.count("skipped"), ups.count("success")
        rule = str(getattr(task.trigger_rule, "value", task.trigger_rule))
        if rule == "all_success":
            states[task.task_id] = "upstream_failed" if failed else "skipped" if skipped else "success"
        elif rule == "none_failed_min_one_success":
            states[task.task_id] = ("upstream_failed" if failed else "skipped" if skipped == len(ups)
                                    else "success" if success else "upstream_failed")
        else:
            pytest.fail(f"{task.task_id}: trigger rule {rule} is not modelled by run_states: add it")
    return states


def test_publishing_runs_after_an_approval_or_a_skipped_one_but_not_after_a_skipped_training(dag_bag):
    """publish_champion follows promote_candidate whether approve_champion ran or was skipped, and is
    skipped with them when the run skipped training (a weekly run before any features exist)."""
    dag = dag_bag.dags["flights_train"]
    publish = dag.get_task("publish_champion")
    assert publish.trigger_rule == "none_failed_min_one_success"
    assert run_states(dag, {})["publish_champion"] == "success"  # approved
    skipped_approval = run_states(dag, {"approve_champion": "skipped"})  # no approval asked (or the version lost)
    assert skipped_approval["promote_candidate"] == "success" and skipped_approval["publish_champion"] == "success"
    no_training = run_states(dag, {"plan_training": "skipped"})
    assert set(no_training.values()) == {"skipped"}, no_training
    failed = run_states(dag, {"promote_candidate": "failed"})
    assert failed["publish_champion"] == "upstream_failed"  # never moves the alias after a failed training
