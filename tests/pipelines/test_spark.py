"""The local Spark session the jobs run on."""

from pipelines.spark import LOCAL_JVM_OPTIONS


def test_a_local_session_runs_its_jvm_with_the_quick_compiler_only(spark):
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert LOCAL_JVM_OPTIONS in list(runtime.getInputArguments())
