"""The Spark session the jobs run on, and what is checked before a job starts."""

import pytest

from pipelines.spark import LOCAL_JVM_OPTIONS, check_visible
from rmqstore.errors import InvalidArgumentError
from services.cli.main import main


def test_a_local_session_runs_its_jvm_with_the_quick_compiler_only(spark):
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert LOCAL_JVM_OPTIONS in list(runtime.getInputArguments())


def test_paths_the_executors_cannot_see_are_refused_before_any_task(spark, tmp_path):
    check_visible(spark, {"--store": tmp_path})  # seen: nothing to say
    missing = tmp_path / "not-mounted"
    with pytest.raises(InvalidArgumentError) as caught:
        check_visible(spark, {"--store": tmp_path, "the parent of --out": missing})
    assert str(caught.value).startswith(
        f"the parent of --out {missing} is not visible to the Spark executors on ")
    assert "every executor mounts at the same path" in str(caught.value)


def test_a_spark_setting_must_be_key_equals_value(capsys):
    assert main(["rebuild", "--store", ".", "--out", "x", "--conf", "spark.executor.memory"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --conf 'spark.executor.memory': expected KEY=VALUE")
