"""``cuvee provision``: the seed's RealtimeProvisioningHelper. From a sample committed segment, the number of stream
partitions and their ingestion rate, it tells for each number of hosts and each segment duration the memory a host
needs, the segment size, the consuming memory and the segments each host serves (``matrices``, pure), and
``measure`` reads what those need from the sample."""

from cuvee.provision.plan import Measured, ProvisionInputs, matrices, measure

__all__ = ["Measured", "ProvisionInputs", "matrices", "measure"]
