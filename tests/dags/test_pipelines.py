"""One Airflow serves many pipelines: each folder (or deployment file) of ``$PIPELINES_DIR`` gets its
own DAGs, Assets, lake and jobs' environment, and a pipeline that cannot be served is said by name
without taking the others down."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jobs.config.files import PIPELINES

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"
FLIGHTS = PIPELINES / "flights"


def _deployment(folder: Path, name: str, **sections) -> Path:
    """A deployment's file ``<name>.yaml`` that serves the bundled flights with ``sections`` changed."""
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"pipeline": str(FLIGHTS), **sections}))
    return path


def _own_model(name: str) -> dict:
    return {"train": {"model_name": f"{name}_model", "experiment": f"{name}_experiment"}}


def _bag(monkeypatch, folder: Path):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("PIPELINES_DIR", str(folder))
    return DagBag(dag_folder=str(DAGS_DIR))


def _asset_names(condition) -> set[str]:
    if hasattr(condition, "objects"):
        return set().union(*(_asset_names(part) for part in condition.objects))
    return {condition.name}


@pytest.fixture
def two(tmp_path, monkeypatch):
    """Two pipelines over the same tables, each with its own model: ``flights`` and ``rivals``."""
    _deployment(tmp_path, "flights")
    _deployment(tmp_path, "rivals", **_own_model("rivals"))
    return _bag(monkeypatch, tmp_path)


def test_each_pipeline_gets_its_three_dags(two):
    assert two.import_errors == {}
    assert sorted(two.dag_ids) == ["flights_ingest", "flights_score", "flights_train",
                                   "rivals_ingest", "rivals_score", "rivals_train"]
    for dag_id, dag in two.dags.items():
        assert f"pipeline:{dag_id.split('_')[0]}" in dag.tags
        assert dag.doc_md.startswith(f"**Pipeline `{dag_id.split('_')[0]}`**")


def test_an_asset_of_one_pipeline_starts_only_that_pipeline_s_dags(two):
    updated = {dag_id: {a.name for t in dag.tasks for a in t.outlets} for dag_id, dag in two.dags.items()}
    scheduled = {dag_id: _asset_names(dag.timetable.asset_condition) for dag_id, dag in two.dags.items()
                 if getattr(dag.timetable, "asset_condition", None) is not None}
    for name in ("flights", "rivals"):
        own = {f"{name}_features", f"{name}_scoring_drift", f"{name}_model_decay", f"{name}_champion_model"}
        assert set().union(*(v for k, v in updated.items() if k.startswith(f"{name}_"))) == own
        assert set().union(*(v for k, v in scheduled.items() if k.startswith(f"{name}_"))) <= own
    flights_uris = {a.uri for t in two.dags["flights_score"].tasks for a in t.outlets}
    assert all(uri.startswith("lakeflow://flights/") for uri in flights_uris)


def test_no_two_dags_share_a_param_object(two):
    """A value resolved on one DAG's param (a trigger form, a test) never shows in another's."""
    params = [(dag_id, name, id(dag.params.get_param(name))) for dag_id, dag in two.dags.items() for name in dag.params]
    assert len({found for _, _, found in params}) == len(params)
    first, second = two.dags["flights_train"], two.dags["rivals_train"]
    first.params.get_param("train_days").resolve(14)
    assert second.params.get_param("train_days").value is None


def test_every_spark_task_runs_its_own_pipeline_s_config_on_its_own_lake(two, tmp_path, monkeypatch):
    from orchestration.pipelines import job_env
    from orchestration.spark_jobs import PipelineSparkSubmitOperator

    monkeypatch.setenv("LAKE_ROOT", str(tmp_path / "lakes"))
    for dag_id, dag in two.dags.items():
        name = dag_id.split("_")[0]
        for task in dag.tasks:
            operator = getattr(task, "operator_class", type(task))
            if not issubclass(operator, PipelineSparkSubmitOperator):
                continue
            kwargs = task.partial_kwargs if hasattr(task, "partial_kwargs") else vars(task)
            assert kwargs["pipeline_name"] == name
            assert kwargs["pipeline_source"] == str(tmp_path / f"{name}.yaml")
            if not hasattr(task, "partial_kwargs"):
                env = job_env(task.pipeline)
                assert env["LAKE_ROOT"] == str(tmp_path / "lakes" / name)
                assert env["PIPELINE_CONFIG"] == str(tmp_path / f"{name}.yaml")


def test_a_pipeline_that_does_not_load_is_said_by_name_and_the_others_are_served(tmp_path, monkeypatch):
    from orchestration.dags import BROKEN_TAG

    _deployment(tmp_path, "flights")
    _deployment(tmp_path, "typo", trian={"epochs": 2}, **_own_model("typo"))  # a misspelt section
    (tmp_path / "empty").mkdir()  # a folder without dataset.yaml
    with pytest.warns(UserWarning) as said:
        bag = _bag(monkeypatch, tmp_path)
    messages = [str(w.message) for w in said if "is not served" in str(w.message)]
    assert any("pipeline 'typo' is not served" in m and "trian" in m for m in messages), messages
    assert any("pipeline 'empty' is not served" in m and "dataset.yaml" in m for m in messages), messages
    assert bag.import_errors == {}
    assert BROKEN_TAG not in bag.dags["flights_train"].tags and not bag.dags["flights_train"].is_paused_upon_creation
    for stage in ("ingest", "score", "train"):
        broken = bag.dags[f"typo_{stage}"]
        assert BROKEN_TAG in broken.tags and broken.is_paused_upon_creation
        assert "Not served: its config does not load." in broken.doc_md and "trian" in broken.doc_md


def test_a_broken_pipeline_s_tasks_fail_at_once_naming_it(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from jobs.config.pipelines import discover
    from orchestration.pipelines import config_of

    _deployment(tmp_path, "typo", train={"epochs": "many"}, **{"score": {}})
    (pipeline,) = discover(str(tmp_path))
    with pytest.raises(AirflowFailException, match=r"pipeline 'typo'.*train\.epochs.*not retried"):
        config_of(pipeline)


def test_two_pipelines_may_not_share_a_name_a_model_or_an_experiment(tmp_path):
    from jobs.config.pipelines import discover

    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    _deployment(first, "flights")
    _deployment(second, "flights", **_own_model("other"))
    _deployment(first, "copy")  # the flights' model and experiment, under another name
    found = {(p.name, Path(p.source).parent.name): p.error for p in discover(f"{first}:{second}")}
    assert "has the name 'flights' of" in found[("flights", "a")] and str(second) in found[("flights", "a")]
    assert "rename one of the folders or files" in found[("flights", "b")]
    assert "registered model 'flight_delay'" in found[("copy", "a")]
    assert "give each its own train.model_name" in found[("copy", "a")]
    assert "MLflow experiment 'flight_delay'" in found[("copy", "a")]


def test_a_pipeline_s_name_is_its_folder_s_and_must_be_a_plain_identifier(tmp_path):
    from jobs.config.pipelines import discover, name_of

    assert name_of(FLIGHTS) == "flights"
    assert name_of(_deployment(tmp_path, "deployment")) == "flights"  # $PIPELINE_CONFIG: the pipeline it changes
    assert [p.name for p in discover("", str(FLIGHTS))] == ["flights"]
    bad = tmp_path / "bad"
    bad.mkdir()
    _deployment(bad, "Flights-2", **_own_model("x"))
    (found,) = discover(str(bad))
    assert "a pipeline's name is a lower-case letter" in found.error


def test_the_bundled_pipelines_are_served_by_default(monkeypatch):
    from jobs.config.pipelines import discover

    monkeypatch.delenv("PIPELINES_DIR", raising=False)
    monkeypatch.delenv("PIPELINE_CONFIG", raising=False)
    assert [(p.name, p.error) for p in discover()] == [(p.name, "") for p in discover(str(PIPELINES))]
    assert "flights" in [p.name for p in discover()]


def test_a_task_sees_the_feed_s_empty_days_in_its_own_pipeline_s_raw_zone(tmp_path, monkeypatch):
    """The tasks that consult the calendar (publish_features, plan_scoring, the training plan) see
    the days landed without rows as closed, as the jobs do, in the pipeline's own lake."""
    import datetime as dt

    from jobs.config.pipelines import discover
    from orchestration.pipelines import calendar_of, lake_of

    monkeypatch.setenv("LAKE_ROOT", str(tmp_path / "lakes"))
    _deployment(tmp_path, "quiet", feed_calendar={"empty_days": True}, **_own_model("quiet"))
    (pipeline,) = discover(str(tmp_path))
    lake = lake_of(pipeline)
    for day, text in ((2, "year,month\n"), (3, "year,month\n2013,1\n"), (6, "year,month\n")):
        file = Path(lake.raw_file("flights", dt.date(2013, 1, day)))
        file.parent.mkdir(parents=True)
        file.write_text(text)
    assert calendar_of(pipeline, dt.date(2013, 1, 5)).closed == (dt.date(2013, 1, 2),)
    assert calendar_of(pipeline).open_between(dt.date(2013, 1, 1), dt.date(2013, 1, 7)) == [
        dt.date(2013, 1, d) for d in (1, 3, 4, 5, 7)]
