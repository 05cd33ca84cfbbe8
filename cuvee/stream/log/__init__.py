"""The embedded log: Cuvee's default stream, topics of append-only partition files in one directory.

Layout: ``<dir>/<topic>/topic.json`` (partition count, segment size, retention) and, per partition,
``<dir>/<topic>/<partition>/<base:020d>.log`` + ``.index`` segment files. See ``partition`` for how appends from
several processes stay safe and ``frames`` for the record format.
"""

from cuvee.stream.log.admin import LogAdmin
from cuvee.stream.log.consumer import LogConsumer
from cuvee.stream.log.frames import CorruptFrameError
from cuvee.stream.log.producer import LogProducer
from cuvee.stream.log.topic import TopicSettings

__all__ = ["CorruptFrameError", "LogAdmin", "LogConsumer", "LogProducer", "TopicSettings"]
