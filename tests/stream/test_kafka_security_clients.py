"""The translated security settings reach librdkafka: its clients accept them (certificates are loaded when a
client is made), producers and admin clients get them too, and a broker that refuses the login is reported with
librdkafka's reason, never with the password.

tansu (the tests' broker) cannot accept a SASL login or a TLS connection (see ``cuvee.testing.tansu``): the
successful paths are checked as far as librdkafka goes without a broker, the failing ones against tansu.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from cuvee.config.kafka_security import kafka_client_properties
from cuvee.errors import UserError
from cuvee.spi.stream import StreamError
from cuvee.stream import kafka_consumer_properties, open_admin
from cuvee.stream.kafka import KafkaAdmin, KafkaConsumer, KafkaProducer, shared_client_settings
from cuvee.testing.tansu import TansuBroker

PASSWORD = "pa55-w0rd-never-shown"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA (PEM), a client key and certificate in one PEM file, and the same as a PKCS12 store."""
    root = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    client = ca.issue_cert("client.example")
    paths = {"ca": root / "ca.pem", "client_pem": root / "client.pem", "client_p12": root / "client.p12"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    client.private_key_and_cert_chain_pem.write_to_path(str(paths["client_pem"]))
    key = serialization.load_pem_private_key(client.private_key_pem.bytes(), password=None)
    cert = x509.load_pem_x509_certificate(client.cert_chain_pems[0].bytes())
    paths["client_p12"].write_bytes(pkcs12.serialize_key_and_certificates(
        b"client", key, cert, None, serialization.BestAvailableEncryption(PASSWORD.encode())))  # type: ignore[arg-type]
    return paths


def _settings(configs: dict[str, str]) -> dict[str, str]:
    settings, issues = kafka_client_properties(configs)
    assert issues == []
    return settings


def _make_every_client(settings: dict[str, str]) -> None:
    """librdkafka loads certificates and checks SASL settings when a client is made (no broker needed)."""
    base = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0}
    Consumer({**base, **settings, "group.id": "g"}).close()
    Producer({**base, **shared_client_settings(settings)})
    AdminClient({**base, **shared_client_settings(settings)})


def test_librdkafka_takes_pem_stores_and_sasl(pki: dict[str, Path]) -> None:
    settings = _settings({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="svc" password="{PASSWORD}";',
        "ssl.truststore.location": str(pki["ca"]), "ssl.truststore.type": "PEM",
        "ssl.keystore.location": str(pki["client_pem"]), "ssl.keystore.type": "PEM"})
    assert shared_client_settings(settings) == settings  # producers and admin clients get all of it
    _make_every_client(settings)


def test_librdkafka_takes_inline_pem_and_pkcs12(pki: dict[str, Path]) -> None:
    _make_every_client(_settings({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": pki["ca"].read_text(),
        "ssl.keystore.location": str(pki["client_p12"]), "ssl.keystore.type": "PKCS12",
        "ssl.keystore.password": PASSWORD}))


def test_the_untranslated_java_keys_are_what_librdkafka_refuses(pki: dict[str, Path]) -> None:
    """Why the translation exists: handed over as they are, Pinot's keys fail in librdkafka."""
    with pytest.raises(Exception, match="Java JAAS configuration is not supported"):
        Consumer({"group.id": "g", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                  "sasl.jaas.config": "x", "log_level": 0})
    with pytest.raises(Exception, match="Java TrustStores are not supported"):
        Consumer({"group.id": "g", "security.protocol": "SSL", "ssl.truststore.location": str(pki["ca"]),
                  "log_level": 0})


def test_settings_librdkafka_refuses_are_a_stream_error_without_secrets(tmp_path: Path) -> None:
    bad_key = "-----BEGIN PRIVATE KEY-----\n" + PASSWORD + "\n-----END PRIVATE KEY-----\n"
    with pytest.raises(StreamError) as caught:
        KafkaConsumer("127.0.0.1:9", "t", {"security.protocol": "SSL", "ssl.key.pem": bad_key,
                                          "ssl.certificate.pem": bad_key}, timeout_s=1)
    assert "the Kafka client settings were refused" in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_a_table_config_with_unusable_keys_never_opens_a_client() -> None:
    configs = {"streamType": "kafka", "stream.kafka.topic.name": "t", "stream.kafka.broker.list": "127.0.0.1:9",
               "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
               "sasl.jaas.config": f"PlainLoginModule required password={PASSWORD}"}
    with pytest.raises(UserError) as caught:
        open_admin(configs)
    assert "'sasl.jaas.config'" in str(caught.value) and PASSWORD not in str(caught.value)


@pytest.fixture(scope="module")
def secured_tansu() -> Iterator[TansuBroker]:
    with TansuBroker(authentication=True) as broker:
        yield broker


@pytest.mark.kafka
def test_a_refused_login_is_reported_by_every_client(secured_tansu: TansuBroker) -> None:
    configs = {"streamType": "kafka", "stream.kafka.topic.name": "t",
               "stream.kafka.broker.list": secured_tansu.bootstrap_servers,
               "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
               "sasl.jaas.config": f'{SCRAM} required username="svc" password="{PASSWORD}";'}
    settings = kafka_consumer_properties(configs)
    servers = secured_tansu.bootstrap_servers
    clients = [lambda: KafkaConsumer(servers, "t", settings, timeout_s=1.5),
               lambda: KafkaProducer(servers, "t", shared_client_settings(settings), timeout_s=1.5),
               lambda: KafkaAdmin(servers, shared_client_settings(settings), timeout_s=1.5).topic_exists("t")]
    for make in clients:
        with pytest.raises(StreamError) as caught:
            make()
        message = str(caught.value)
        assert "SASL authentication" in message, message
        assert PASSWORD not in message


@pytest.mark.kafka
def test_a_client_without_credentials_is_refused_by_the_secured_broker(secured_tansu: TansuBroker) -> None:
    with pytest.raises(StreamError, match="cannot read Kafka metadata"):
        KafkaConsumer(secured_tansu.bootstrap_servers, "t", {}, timeout_s=1.5)
