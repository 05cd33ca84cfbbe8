"""TLS on every role of a live cluster: the roles serve HTTPS with a certificate from a test CA (``trustme``), call
each other over it trusting that CA (commits, queries), and a client must trust it too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from cuvee.node.tls import TlsConfig
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

TABLE = "secure"
SCHEMA = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}


def test_roles_serve_and_call_each_other_over_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    for extra in cert.cert_chain_pems[1:]:
        extra.write_to_path(str(cert_file), append=True)
    cert.private_key_pem.write_to_path(str(key_file))
    tls: dict[str, Any] = {"tls": {"certfile": str(cert_file), "keyfile": str(key_file), "ca_file": str(ca_file)}}
    with pytest.raises(ValueError, match="cannot be loaded"):  # a key that is not the certificate's: said at start
        TlsConfig(certfile=str(cert_file), keyfile=str(ca_file))
    with pytest.raises(ValueError, match="go together"):
        TlsConfig(certfile=str(cert_file))
    with InProcessCluster(tmp_path / "cluster", servers=2, controller=tls, server=tls, broker=tls,
                          verify=str(ca_file)) as cluster:
        assert cluster.controller_url.startswith("https://") and cluster.broker_url.startswith("https://")
        configs = cluster.realtime_table(SCHEMA)
        cluster.produce(configs, ({"id": i, "v": 1} for i in range(450)), key_field="id")
        wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == 450, 60,
                   message="rows never became queryable over TLS")
        wait_until(lambda: len(cluster.committed_segments(TABLE)) >= 4, 60, message="no commit over TLS")
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the cluster's CA
            httpx.get(f"{cluster.broker_url}/health", timeout=5)
        plain = cluster.broker_url.replace("https://", "http://")
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port
            httpx.get(f"{plain}/health", timeout=5)
