"""How far the JIT compiler of the suite's Spark JVMs goes: every tier for the two that live for the
whole run (the sessions with the parallel collector), C1 only for the rest (docs/tests.md).

The JVMs the tests start live for one job over a few days of data (a task's spark-submit, a job's
own session): stopping their compiler at C1 (tier 1) costs them a third to a half less CPU on a
2-core machine, because C2 compiles code such a JVM is done with before the compiled code pays off.
A test process's own session and the deployed stack's Spark Connect server run for the whole
suite; their code gets hot, and they keep every tier.
"""

from __future__ import annotations

# Appended to SPARK_SUBMIT_OPTS (tests/conftest.py), so every spark-submit the tests start gets it.
ONE_JOB = "-XX:TieredStopAtLevel=1"
# A long-lived JVM's spark-submit settings (the Connect server's): the launcher puts the driver's
# default Java options after SPARK_SUBMIT_OPTS, and of two values of a JVM flag the last wins.
LONG_LIVED = {"spark.driver.defaultJavaOptions": "-XX:TieredStopAtLevel=4"}
# A test process's own session also collects with the parallel collector, not G1 (Java's default
# here), whose concurrent threads cost it about a tenth more CPU on 2 cores (docs/performance.md).
SESSION = {key: f"{value} -XX:+UseParallelGC" for key, value in LONG_LIVED.items()}


def long_lived_args() -> list[str]:
    """LONG_LIVED as spark-submit arguments."""
    return [arg for key, value in LONG_LIVED.items() for arg in ("--conf", f"{key}={value}")]


def tier(jvm) -> int:
    """The highest tier the JIT compiler of the JVM behind a py4j gateway ``jvm`` compiles to, as
    the JVM itself reports it (its ``TieredStopAtLevel`` flag)."""
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    return int(bean.getVMOption("TieredStopAtLevel").getValue())


def collectors(jvm) -> list[str]:
    """The garbage collectors of the JVM behind ``jvm``, by the names it gives them."""
    return [bean.getName() for bean in jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()]
