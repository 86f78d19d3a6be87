"""A SparkSession sized for the remap job: small shuffles, no UI, quiet logs.

``make_spark(master)`` works for ``local[*]`` (the default), ``local[N]`` and any
cluster master URL (``spark://HOST:PORT`` of a standalone master, ``yarn``,
``k8s://...``). Spark keeps one active session per process: when one is already
running, ``getOrCreate`` returns it and ``master``/memory settings are ignored
(Spark's own rule); call ``stop_spark`` between runs that need a different master.
Starting a local session takes several seconds (JVM start): long-running callers
keep one session and reuse it.

Configuration, lowest first: vpq's defaults (``base_conf``), then ``extra_conf``
(``rebalance.spark_conf``). Among the defaults, ``spark.pyspark.python`` is this
process's interpreter unless ``PYSPARK_PYTHON`` is set: executors that start Python
workers use the driver's Python (the same path must exist on every Spark host). The
job itself runs no Python on executors (only DataFrame expressions, no UDF, RDD
function or pandas function), so vpq need not be installed on the Spark workers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_APP_NAME = "vpq-rebalance"


def base_conf(
    shuffle_partitions: int = 4, driver_memory: str = "1g", env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """vpq's Spark defaults for the job (see the module docstring); ``env`` defaults to
    ``os.environ``."""
    if shuffle_partitions < 1:
        raise ValueError("shuffle_partitions must be >= 1")
    conf = {
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(shuffle_partitions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": driver_memory,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
    }
    if not (env if env is not None else os.environ).get("PYSPARK_PYTHON"):
        conf["spark.pyspark.python"] = sys.executable
    return conf


def make_spark(
    master: str = "local[*]",
    app_name: str = DEFAULT_APP_NAME,
    shuffle_partitions: int = 4,
    driver_memory: str = "1g",
    log_level: str = "WARN",
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Start (or get) a SparkSession for the job; see the module docstring."""
    conf = {**base_conf(shuffle_partitions, driver_memory), **(extra_conf or {})}
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def stop_spark(spark: SparkSession) -> None:
    """Stop the session (and its JVM-side context); safe to call twice."""
    spark.stop()
