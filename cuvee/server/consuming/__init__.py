"""Consuming segments on a server: partition consumer, the replica's side of the completion protocol, build and
upload (``ConsumingSegment``), the pure protocol state machine (``fsm``) and the controller client (``client``)."""

from cuvee.server.consuming.client import CompletionUnavailable, SegmentCompletionClient, metastore_leader_resolver
from cuvee.server.consuming.config import ConsumerConfig
from cuvee.server.consuming.fsm import ConsumerState
from cuvee.server.consuming.segment import ConsumingSegment, SegmentReleasedError

__all__ = [
    "CompletionUnavailable",
    "ConsumerConfig",
    "ConsumerState",
    "ConsumingSegment",
    "SegmentCompletionClient",
    "SegmentReleasedError",
    "metastore_leader_resolver",
]
