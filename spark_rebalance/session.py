"""A SparkSession sized for the remap job: small shuffles, no UI, quiet logs.

``make_spark(master)`` works for ``local[*]`` (the default), ``local[N]`` and any
cluster master URL. Spark keeps one active session per process: when one is
already running, ``getOrCreate`` returns it and ``master``/memory settings are
ignored (Spark's own rule); call ``stop_spark`` between runs that need a
different master. Starting a local session takes several seconds (JVM start):
long-running callers keep one session and reuse it.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_APP_NAME = "vpq-rebalance"


def make_spark(
    master: str = "local[*]",
    app_name: str = DEFAULT_APP_NAME,
    shuffle_partitions: int = 4,
    driver_memory: str = "1g",
    log_level: str = "WARN",
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Start (or get) a SparkSession for the job; see the module docstring."""
    if shuffle_partitions < 1:
        raise ValueError("shuffle_partitions must be >= 1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "true")
    )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def stop_spark(spark: SparkSession) -> None:
    """Stop the session (and its JVM-side context); safe to call twice."""
    spark.stop()
