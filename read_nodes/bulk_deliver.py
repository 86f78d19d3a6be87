"""``deliver_many``: a poll's messages handed to their consumer in one C call, or None
where the extension ``_fast_deliver`` is not built (``GroupDelivery._deliver`` then
does it message by message, to the same effect).

``deliver_many(msgs, consumer_id, inflight, deadline, mask, timer)`` does for each
``Msg`` of ``msgs``, in order, what ``GroupDelivery._deliver`` does while no context is
unroutable (state INFLIGHT, holder, count + 1, due, ``inflight["pp-offset"] = msg``) and
sets its ``timer``, and answers their ``Delivery`` tuples. The C file's header says so
field by field; ``tests/read_nodes/test_bulk_offer.py`` holds it to the Python path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vpq.read_nodes.delivery_items import INFLIGHT, Msg
from vpq.read_nodes.delivery_types import Delivery

DeliverMany = Callable[..., "list[Any]"]

deliver_many: DeliverMany | None
try:
    from vpq.read_nodes._fast_deliver import bind as _bind
    from vpq.read_nodes._fast_deliver import deliver as _deliver
except ImportError:  # no C compiler at install: message by message
    deliver_many = None
else:
    _bind(Msg, INFLIGHT, Delivery)
    deliver_many = _deliver
