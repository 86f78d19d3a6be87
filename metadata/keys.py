"""Every Redis key name vpq uses, in one place.

All keys live under one configurable prefix (``RedisSettings.key_prefix``), so
several clusters (or tests) can share one Redis. Names are built by plain string
formatting; no hash tags (vpq's metadata lives on a single Redis node).

Layout (``p`` = prefix):

========================================  ======  ==============================================
key                                       type    content
========================================  ======  ==============================================
``p:queues``                              hash    queue name -> JSON queue record
``p:queue_ids``                           hash    queue id -> queue name
``p:seq:queue``                           string  last queue id handed out (INCR, never reused)
``p:contexts``                            hash    context token ``env/set/lane`` -> id
``p:context_ids``                         hash    context id -> token
``p:seq:context``                         string  last context id handed out
``p:map``                                 hash    ``epoch`` of the placement map
``p:map:queues``                          hash    queue name -> JSON placement entry (``metadata.map_entries``)
``p:map:changes``                         zset    queue name -> epoch of its last placement change
``p:map:load``                            hash    pp -> vps the map places on it
``p:maps:history``                        list    one JSON entry per published epoch, newest first
``p:lineage:{queue}``                     hash    vp -> encoded lineage ranges
``p:nodes:{role}``                        zset    node id -> lease deadline (ms, Redis clock)
``p:nodes:{role}:info``                   hash    node id -> JSON {address, meta}
``p:lease:{resource}``                    hash    ``node``, ``token`` (key expires with the lease)
``p:fence:{resource}``                    string  last fencing token issued (INCR)
``p:fence_floor``                         string  highest token of a deleted ``p:fence:{resource}``
``p:groups:{queue}``                      set     group names of the queue
``p:group:{queue}:{group}``               hash    group record (start, generation, created_ms)
``p:group:{queue}:{group}:deadlines``     zset    consumer id -> session deadline (ms)
``p:group:{queue}:{group}:members``       hash    consumer id -> JSON member info
``p:group:{queue}:{group}:start``         hash    pp -> start offset (set once)
``p:ackstate:{queue}:{group}``            hash    stream -> encoded ack state (``metadata.acks``)
``p:redrive:{dlq}``                       hash    ``queue_id:pp`` -> redrive cursor (``metadata.redrive``)
``p:cluster:physical_partitions``         string  the cluster's pp count (``metadata.partition_count``)
``p:cluster:shape``                       hash    physical_partitions, replication_factor, write_nodes
                                                  (``metadata.cluster_shape``)
``p:cluster:write_slots``                 hash    write node id -> index (``metadata.cluster_shape``)
``p:remap:fence``                         hash    the remap fence (``metadata.fences``)
``p:pp_leader:{pp}``                      hash    leader, leader_id, epoch, replicas, isr of a
                                                  replicated pp (``metadata.partition_leaders``)
``p:events``                              pubsub  change announcements (JSON)
``p:events:version``                      string  announcement counter
``p:events:log``                          list    recent announcements, newest first (capped)
========================================  ======  ==============================================

Queue and group names match ``[A-Za-z0-9._-]{1,128}`` and contain no ``:``, so
the names above cannot collide.
"""

from __future__ import annotations


class Keys:
    """Builds the key names under ``prefix``. Pure, cheap, immutable."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        if not prefix:
            raise ValueError("key prefix must not be empty")
        self.prefix = prefix

    def __repr__(self) -> str:
        return f"Keys({self.prefix!r})"

    # queue registry
    def queues(self) -> str:
        return f"{self.prefix}:queues"

    def queue_ids(self) -> str:
        return f"{self.prefix}:queue_ids"

    def queue_seq(self) -> str:
        return f"{self.prefix}:seq:queue"

    # interned isolation contexts
    def contexts(self) -> str:
        return f"{self.prefix}:contexts"

    def context_ids(self) -> str:
        return f"{self.prefix}:context_ids"

    def context_seq(self) -> str:
        return f"{self.prefix}:seq:context"

    # placement map and lineage
    def map(self) -> str:
        return f"{self.prefix}:map"

    def map_queues(self) -> str:
        return f"{self.prefix}:map:queues"

    def map_changes(self) -> str:
        return f"{self.prefix}:map:changes"

    def map_load(self) -> str:
        return f"{self.prefix}:map:load"

    def map_history(self) -> str:
        return f"{self.prefix}:maps:history"

    def lineage(self, queue: str) -> str:
        return f"{self.prefix}:lineage:{queue}"

    # nodes and leases
    def nodes(self, role: str) -> str:
        return f"{self.prefix}:nodes:{role}"

    def node_info(self, role: str) -> str:
        return f"{self.prefix}:nodes:{role}:info"

    def lease(self, resource: str) -> str:
        return f"{self.prefix}:lease:{resource}"

    def fence(self, resource: str) -> str:
        return f"{self.prefix}:fence:{resource}"

    def fence_floor(self) -> str:
        return f"{self.prefix}:fence_floor"

    # consumer groups
    def groups(self, queue: str) -> str:
        return f"{self.prefix}:groups:{queue}"

    def group(self, queue: str, group: str) -> str:
        return f"{self.prefix}:group:{queue}:{group}"

    def group_deadlines(self, queue: str, group: str) -> str:
        return f"{self.prefix}:group:{queue}:{group}:deadlines"

    def group_members(self, queue: str, group: str) -> str:
        return f"{self.prefix}:group:{queue}:{group}:members"

    def group_start(self, queue: str, group: str) -> str:
        return f"{self.prefix}:group:{queue}:{group}:start"

    # ack state
    def acks(self, queue: str, group: str) -> str:
        return f"{self.prefix}:ackstate:{queue}:{group}"

    # replicated partitions
    def pp_leader(self, pp: int) -> str:
        return f"{self.prefix}:pp_leader:{int(pp)}"

    # dead-letter redrive
    def redrive(self, dlq: str) -> str:
        return f"{self.prefix}:redrive:{dlq}"

    # change announcements
    def events(self) -> str:
        return f"{self.prefix}:events"

    def events_version(self) -> str:
        return f"{self.prefix}:events:version"

    def events_log(self) -> str:
        return f"{self.prefix}:events:log"
