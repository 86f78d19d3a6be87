"""A SparkSession sized for the remap job: small shuffles, no UI, quiet logs.

``make_spark(master)`` works for ``local[*]`` (the default), ``local[N]`` and any
cluster master URL (``spark://HOST:PORT`` of a standalone master, ``yarn``,
``k8s://...``). Spark keeps one active session per process: when one is already
running, ``getOrCreate`` returns it and ``master``/memory settings are ignored
(Spark's own rule); call ``stop_spark`` between runs that need a different master.
Starting a local session takes several seconds (JVM start): long-running callers
keep one session and reuse it.

Configuration, lowest first: vpq's defaults (``base_conf``), then ``extra_conf``
(``rebalance.spark_conf``). The Python that executors start for Python work is the
driver's ``PYSPARK_PYTHON`` when the SparkContext starts (PySpark reads only that
variable, not ``spark.pyspark.python``, in a driver started from Python):
``make_spark`` sets the variable, when unset, to ``extra_conf["spark.pyspark.python"]``
or else this interpreter (``executor_python``); the path must exist on every Spark
host. The job itself runs no Python on executors (only DataFrame expressions, no UDF,
RDD function or pandas function), so neither vpq nor that Python is needed on the
Spark workers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_APP_NAME = "vpq-rebalance"


def base_conf(shuffle_partitions: int = 4, driver_memory: str = "1g") -> dict[str, str]:
    """vpq's Spark defaults for the job."""
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
    return conf


def executor_python(conf: Mapping[str, str], env: Mapping[str, str]) -> str:
    """The Python executors start: ``PYSPARK_PYTHON`` when set, else
    ``conf["spark.pyspark.python"]``, else this interpreter."""
    return env.get("PYSPARK_PYTHON") or conf.get("spark.pyspark.python") or sys.executable


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
    os.environ["PYSPARK_PYTHON"] = executor_python(conf, os.environ)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def stop_spark(spark: SparkSession) -> None:
    """Stop the session (and its JVM-side context); safe to call twice."""
    spark.stop()
