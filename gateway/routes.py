"""The route table of the public API: the one source of truth for the router
(``add_routes``), auth (``RouteSpec.access``), metrics labels and the OpenAPI document."""

from __future__ import annotations

from aiohttp import web

from vpq.gateway import handlers_consume as consume
from vpq.gateway import handlers_meta as meta
from vpq.gateway import handlers_produce as produce
from vpq.gateway import handlers_queues as queues
from vpq.gateway.models import (
    AckRequest,
    ElectLeaderRequest,
    JoinRequest,
    NackRequest,
    PollRequest,
    ProduceRequest,
    QueueConfigRequest,
    RedriveRequest,
)
from vpq.gateway.responses import (
    AckResponse,
    ClusterInfo,
    CurrentMap,
    ElectLeaderResponse,
    GroupInfo,
    Health,
    JoinResponse,
    MapHistory,
    NackResponse,
    PollResponse,
    ProduceResponse,
    QueueInfo,
    QueueList,
    RedriveResponse,
)
from vpq.gateway.routes_spec import Access, RouteSpec

Q = "/v1/queues/{queue}"
CONSUMERS = Q + "/groups/{group}/consumers"
CONSUMER = CONSUMERS + "/{consumer_id}"

ROUTES: tuple[RouteSpec, ...] = (
    # -- queues (admin) -------------------------------------------------------------------
    RouteSpec(
        "PUT", Q, queues.put_queue, "putQueue", "Create or update a queue", "queues", Access.ADMIN,
        request_model=QueueConfigRequest, response_model=QueueInfo, status=200, alt_statuses=(201,),
        errors=(409, 429, 503),
        description="201 when created, 200 when updated; answers the queue. Absent fields keep "
        "their value on update and take the defaults on create. virtual_partitions may only grow.",
    ),
    RouteSpec(
        "GET", "/v1/queues", queues.list_queues, "listQueues", "List queues", "queues", Access.ANY_TOKEN,
        response_model=QueueList, errors=(503,),
        description="With auth enabled, any valid token may list; the answer holds only the queues "
        "the token has some scope on.",
    ),
    RouteSpec(
        "GET", Q, queues.get_queue, "getQueue", "Describe a queue", "queues", Access.ADMIN,
        response_model=QueueInfo, errors=(404, 503),
        description="Config, placement of each virtual partition and traffic figures.",
    ),
    RouteSpec(
        "DELETE", Q, queues.delete_queue, "deleteQueue", "Delete a queue", "queues", Access.ADMIN,
        status=204, errors=(404, 503),
    ),
    # -- produce --------------------------------------------------------------------------
    RouteSpec(
        "POST", Q + "/messages", produce.produce, "produce", "Produce messages", "produce", Access.PRODUCE,
        request_model=ProduceRequest, response_model=ProduceResponse, request_required=True,
        errors=(404, 429, 503, 507), isolation_headers=True,
        description="Answered 200 only once every message is durable; results in request order. "
        "All or nothing: one invalid message rejects the batch (400 invalid_message with the index "
        "of the first bad message) and nothing is appended. A message's own lane/env/set win over "
        "the X-Lane/X-Env/X-Set headers, which win over the defaults (prod, \"\", \"\"). 507 "
        "insufficient_storage (with Retry-After) when a write node is short of disk: nothing appended.",
    ),
    # -- consume --------------------------------------------------------------------------
    RouteSpec(
        "POST", CONSUMERS, consume.join, "joinGroup", "Join a consumer group", "consume", Access.CONSUME,
        request_model=JoinRequest, response_model=JoinResponse, errors=(404, 409, 429, 503),
        isolation_headers=True,
        description="The group is created on first join (start: earliest or latest). Isolation "
        "fields absent from the body come from the X-Lane/X-Env/X-Set headers.",
    ),
    RouteSpec(
        "POST", CONSUMER + "/poll", consume.poll, "poll", "Poll messages (heartbeat)", "consume",
        Access.CONSUME, request_model=PollRequest, response_model=PollResponse, errors=(404, 429, 503),
        description="Up to max_messages (default 100, at most 1000), waiting up to wait_ms (default "
        "0, at most 30000) for the first. JSON values come back as value, bytes as value_b64.",
    ),
    RouteSpec(
        "POST", CONSUMER + "/ack", consume.ack, "ack", "Acknowledge messages", "consume", Access.CONSUME,
        request_model=AckRequest, response_model=AckResponse, request_required=True, errors=(404, 429, 503),
    ),
    RouteSpec(
        "POST", CONSUMER + "/nack", consume.nack, "nack", "Give messages back", "consume", Access.CONSUME,
        request_model=NackRequest, response_model=NackResponse, request_required=True, errors=(404, 429, 503),
        description="The messages are delivered again after delay_ms.",
    ),
    RouteSpec(
        "DELETE", CONSUMER, consume.leave, "leaveGroup", "Leave a consumer group", "consume", Access.CONSUME,
        status=204, errors=(404, 503),
        description="The consumer's unacked messages are delivered to the others at once.",
    ),
    RouteSpec(
        "GET", Q + "/groups/{group}", consume.group_info, "getGroup", "Describe a consumer group", "consume",
        Access.CONSUME, response_model=GroupInfo, errors=(404, 503),
        description="Members (consumer_id, lane, env, set, assigned virtual partitions, in-flight "
        "count) and lag: total, by lane, by env, by set.",
    ),
    RouteSpec(
        "DELETE", Q + "/groups/{group}", consume.delete_group, "deleteGroup", "Delete a consumer group", "consume",
        Access.ADMIN, status=204, errors=(404, 409, 503),
        description="The group, its members, delivery state and ack state are gone; joining again "
        "starts a new group (from its join's start position). Its dead-letter queue stays.",
    ),
    RouteSpec(
        "POST", Q + "/groups/{group}/dlq/redrive", consume.redrive, "redriveDeadLetters",
        "Redeliver a group's dead letters", "consume", Access.ADMIN, request_model=RedriveRequest,
        response_model=RedriveResponse, errors=(404, 429, 503, 507),
        description="Messages of the group's dead-letter queue ({queue}.{group}.dlq), oldest first, up "
        "to max_messages (absent: all), are delivered again to this group only (delivery_count "
        "restarts at 1, header x-redriven-from names the dead-letter queue) and leave the "
        "dead-letter queue. At-least-once: a redrive interrupted by a failure may deliver some "
        "of them twice, never lose one. The order of each key among them is kept.",
    ),
    # -- cluster and maps -----------------------------------------------------------------
    RouteSpec(
        "GET", "/v1/cluster", meta.cluster, "getCluster", "Describe the cluster", "cluster",
        Access.ADMIN_GLOBAL, response_model=ClusterInfo, errors=(503,),
        description="Write nodes, read nodes, physical partitions (id, owner, end offset, bytes), "
        "current map epoch.",
    ),
    RouteSpec(
        "POST", "/v1/cluster/partitions/{pp}/leader", meta.elect_leader, "electLeader",
        "Elect the leader of a replicated partition", "cluster", Access.ADMIN_GLOBAL,
        request_model=ElectLeaderRequest, response_model=ElectLeaderResponse, errors=(404, 409, 503),
        request_required=True,
        description="Replaces a failed leader (nothing holds the partition's lease) by the named replica. "
        "An in-sync replica is elected cleanly. An out-of-sync one only with unclean true: the leader "
        "epoch moves on, every other replica truncates to the new leader's history, and the answer "
        "and GET /v1/cluster (last_unclean_election) report the truncation event with lost_offsets, "
        "the acknowledged offsets the cluster may have lost. 409 not_replicated, not_a_replica, "
        "partition_has_leader, replica_not_in_sync, election_conflict; 404 partition_not_found, "
        "node_not_found.",
    ),
    RouteSpec(
        "GET", "/v1/maps/current", meta.current_map, "getCurrentMap", "The current placement map", "cluster",
        Access.ADMIN_GLOBAL, response_model=CurrentMap, errors=(503,),
    ),
    RouteSpec(
        "GET", "/v1/maps/history", meta.map_history, "getMapHistory", "Past map epochs", "cluster",
        Access.ADMIN_GLOBAL, response_model=MapHistory, errors=(503,), query=(meta.HISTORY_LIMIT,),
        description="The latest `limit` map epochs (default 20, at most 1000), newest first: epoch, "
        "time, what changed (queues created, grown or deleted; a remap's splits and moves) and, on "
        "the epoch that ends a remap, the combined imbalance (max/mean load of the physical "
        "partitions) before and after. Epochs published before this history existed are not listed.",
    ),
    # -- service --------------------------------------------------------------------------
    RouteSpec(
        "GET", "/healthz", meta.healthz, "healthz", "Liveness", "service", Access.OPEN, response_model=Health,
        description="200 while the gateway runs.",
    ),
    RouteSpec(
        "GET", "/readyz", meta.readyz, "readyz", "Readiness", "service", Access.OPEN, response_model=Health,
        errors=(503,), description="200 once every node has joined, else 503 not_ready.",
    ),
    RouteSpec(
        "GET", "/metrics", meta.metrics, "metrics", "Prometheus metrics", "service", Access.VALID_TOKEN,
        response_media="text/plain",
    ),
    RouteSpec(
        "GET", "/openapi.json", meta.openapi_json, "openapi", "This OpenAPI document", "service", Access.OPEN,
        response_media="application/json",
    ),
    RouteSpec(
        "GET", "/docs", meta.docs_page, "docs", "Human-readable API page", "service", Access.OPEN,
        response_media="text/html",
    ),
    RouteSpec(
        "GET", "/ui", meta.ui_page, "ui", "Web dashboard", "service", Access.OPEN, response_media="text/html",
        description="A page for people: cluster, queues and traffic, groups and lag, the placement "
        "heat-map and the map history, refreshed every few seconds. The page itself needs no token; "
        "with auth enabled it asks for one (kept for the browser tab) and calls the API with it.",
    ),
)


def add_routes(app: web.Application, routes: tuple[RouteSpec, ...] = ROUTES) -> None:
    """Register every route of the table on ``app``'s router (one resource per path)."""
    resources: dict[str, web.Resource] = {}
    for spec in routes:
        resource = resources.get(spec.path)
        if resource is None:
            resource = resources[spec.path] = app.router.add_resource(spec.path)
        resource.add_route(spec.method, spec.handler)
