"""Sizes of a benchmark run: ``QUICK`` (at most about 2 minutes for all systems, the CI
smoke test) and ``FULL`` (at most about 10 minutes on a 2-core machine). Pure data.

Every loop of the harness is bounded by one of these numbers (a count, a duration or
a time budget), so a slow or stuck system ends a step instead of the run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    producers: int  # concurrent closed-loop producer tasks
    # scenario 1: durable produce throughput
    s1_duration_s: float
    s1_max_messages: dict[int, int]  # batch size -> message cap
    # scenario 2: end-to-end latency at a fixed rate (open loop)
    s2_rate: float
    s2_duration_s: float
    # scenario 3: logical queues 1 -> N
    s3_steps: tuple[int, ...]
    s3_messages: int  # per round
    s3_create_budget_s: float
    s3_delete_budget_s: float  # what is not deleted by then is left to teardown()
    # scenario 4: consumer scaling
    s4_steps: tuple[int, ...]
    s4_messages_per_consumer: int
    # scenario 5: catch-up read while producing
    s5_backlog: int  # message cap of the backlog, loaded for at most s5_backlog_s
    s5_backlog_s: float
    s5_rate: float
    s5_duration_s: float  # idle phase
    s5_catchup_max_s: float  # producing during catch-up stops when caught up, or after this
    # one scenario on one system may not take longer than this
    scenario_timeout_s: float
    s2_keys: int = 64
    s3_batch: int = 10
    s3_lanes: int = 4
    s3_rounds: int = 3  # a step's rate is the median of its rounds' rates
    # the last step and its paired 1-queue reference alternate this many rounds each (more
    # than the other steps: their ratio is the scenario's headline, and single rounds of a
    # second on a shared machine spread by +-20 %)
    s3_paired_rounds: int = 5
    s3_count_sample: int = 50
    s3_drain_sample: int = 3
    s4_work_ms: float = 10.0
    s4_shards: int = 64
    s4_keys: int = 4096
    s4_batch: int = 10
    drain_batch: int = 500
    message_bytes: int = 1024


QUICK = Profile(
    name="quick",
    producers=16,
    s1_duration_s=0.8,
    s1_max_messages={1: 8_000, 100: 20_000},
    s2_rate=200.0,
    s2_duration_s=1.5,
    s3_steps=(1, 100, 1_000),
    s3_messages=1_000,
    s3_rounds=1,
    s3_paired_rounds=1,
    s3_create_budget_s=5.0,
    s3_delete_budget_s=5.0,
    s4_steps=(1, 16, 64),
    s4_messages_per_consumer=30,
    s5_backlog=30_000,
    s5_backlog_s=1.0,
    s5_rate=200.0,
    s5_duration_s=1.0,
    s5_catchup_max_s=1.5,
    scenario_timeout_s=60.0,
)

FULL = Profile(
    name="full",
    producers=16,
    s1_duration_s=3.0,
    # above what any system sends in s1_duration_s, so each is measured over the whole
    # duration (at 200,000, vpq's batch-100 run ended after 2.3 s of its 3)
    s1_max_messages={1: 100_000, 100: 400_000},
    s2_rate=200.0,
    s2_duration_s=6.0,
    s3_steps=(1, 100, 1_000, 10_000),
    s3_messages=10_000,
    s3_create_budget_s=30.0,
    s3_delete_budget_s=30.0,
    s4_steps=(1, 4, 16, 64),
    s4_messages_per_consumer=200,
    s5_backlog=200_000,
    s5_backlog_s=5.0,
    s5_rate=200.0,
    s5_duration_s=4.0,
    s5_catchup_max_s=8.0,
    scenario_timeout_s=240.0,
)


def profile_for(quick: bool) -> Profile:
    return QUICK if quick else FULL
