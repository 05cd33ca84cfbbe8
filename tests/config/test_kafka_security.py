"""Pinot's Kafka security keys translated to librdkafka's (``cuvee.config.kafka_security``): a pure function."""

from __future__ import annotations

import pytest

from cuvee.config import StreamConfig
from cuvee.config.errors import ConfigValidationError
from cuvee.config.kafka_security import kafka_client_properties, parse_jaas_config

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SECRET = "s3cr=t;\"pw"
JAAS = f'{SCRAM} required username="alice" password="s3cr=t;\\"pw";'
BASE = {"streamType": "kafka", "stream.kafka.topic.name": "t", "stream.kafka.broker.list": "localhost:9092"}


def translate(**keys: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    settings, issues = kafka_client_properties({**BASE, **keys})
    return settings, [(issue.key, issue.message) for issue in issues]


def top(**keys: str) -> dict[str, str]:
    """Keyword names use _ for . (security_protocol -> security.protocol)."""
    return {key.replace("_", "."): value for key, value in keys.items()}


def test_pinot_style_sasl_ssl_keys_at_the_top_level() -> None:
    settings, issues = kafka_client_properties({**BASE, **top(
        security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", ssl_truststore_location="/etc/ca.pem"),
        "sasl.jaas.config": JAAS, "ssl.truststore.type": "PEM",
        "stream.kafka.consumer.prop.fetch.min.bytes": "1"})
    assert issues == []
    assert settings == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                        "sasl.password": SECRET, "ssl.ca.location": "/etc/ca.pem", "fetch.min.bytes": "1"}


def test_the_same_keys_as_consumer_props() -> None:
    prefix = "stream.kafka.consumer.prop."
    settings, issues = kafka_client_properties({**BASE, prefix + "security.protocol": "sasl_plaintext",
                                                prefix + "sasl.mechanism": "plain",
                                                prefix + "sasl.jaas.config": JAAS.replace(SCRAM, PLAIN)})
    assert issues == []
    assert settings == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                        "sasl.password": SECRET}


def test_librdkafka_settings_pass_through() -> None:
    prefix = "stream.kafka.consumer.prop."
    settings, issues = kafka_client_properties({
        **BASE, prefix + "security.protocol": "SASL_SSL", prefix + "sasl.mechanisms": "SCRAM-SHA-256",
        prefix + "sasl.username": "bob", prefix + "sasl.password": "pw", prefix + "ssl.ca.location": "/ca.pem",
        prefix + "ssl.keystore.location": "/client.p12", prefix + "ssl.keystore.password": "pw2"})
    assert issues == []
    assert settings["sasl.username"] == "bob" and settings["ssl.keystore.location"] == "/client.p12"


@pytest.mark.parametrize("spelling", ["sasl.mechanisms", "sasl.mechanism"])
@pytest.mark.parametrize(("mechanism", "own"), [
    ("OAUTHBEARER", {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "c",
                     "sasl.oauthbearer.client.secret": "s", "sasl.oauthbearer.token.endpoint.url": "https://idp/t"}),
    ("GSSAPI", {"sasl.kerberos.service.name": "kafka", "sasl.kerberos.keytab": "/etc/k.keytab",
                "sasl.kerberos.principal": "cuvee@EXAMPLE.COM"}),
])
def test_librdkafkas_own_gssapi_and_oauthbearer_setup_is_accepted(spelling: str, mechanism: str,
                                                                   own: dict[str, str]) -> None:
    """As the docs say to give them; librdkafka's spelling was refused with an error about sasl.jaas.config,
    which the config did not hold."""
    prefix = "stream.kafka.consumer.prop."
    settings, issues = kafka_client_properties({**BASE, prefix + "security.protocol": "SASL_SSL",
                                                prefix + spelling: mechanism,
                                                **{prefix + key: value for key, value in own.items()}})
    assert issues == []
    assert settings == {"security.protocol": "SASL_SSL", spelling: mechanism, **own}


def test_a_key_given_twice_must_agree() -> None:
    _, issues = translate(**top(security_protocol="SSL"), **{"stream.kafka.consumer.prop.security.protocol": "SASL_SSL"})
    assert issues == [("stream.kafka.consumer.prop.security.protocol",
                       "conflicts with 'security.protocol'; give only one of them")]
    settings, issues = translate(**top(security_protocol="SSL"), **{"stream.kafka.consumer.prop.security.protocol": "SSL"})
    assert issues == [] and settings == {"security.protocol": "SSL"}


@pytest.mark.parametrize("jaas", [
    f'{SCRAM} required username="alice" password="{SECRET}"',  # no ';'
    f'{SCRAM} required username="alice" password="s3cr=t;',  # unterminated quote
    f'{SCRAM} username="alice" password="s3cr=t";',  # no flag
    f'{SCRAM} required username="alice";',  # no password
    f'{SCRAM} required username="alice" password="s3cr=t" password="s3cr=t";',
    f'{SCRAM} required username="alice" password="s3cr=t" {SCRAM} required;',  # two modules
    f'{SCRAM} required username="alice" password="s3cr=t" tokenauth="true";',
    f'com.example.Secret{SECRET} required username="alice" password="s3cr=t";',
    f's3cr=t;',
])
def test_a_malformed_jaas_config_is_refused_without_echoing_it(jaas: str) -> None:
    _, issues = translate(**top(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256"),
                          **{"sasl.jaas.config": jaas})
    assert [key for key, _ in issues] == ["sasl.jaas.config"]
    message = issues[0][1]
    assert "s3cr" not in message and "alice" not in message
    with pytest.raises(ConfigValidationError) as caught:
        StreamConfig.from_json({**BASE, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                                "sasl.jaas.config": jaas})
    assert "s3cr" not in str(caught.value)
    assert caught.value.issues[0].path == "$['sasl.jaas.config']"


def test_jaas_parsing() -> None:
    assert parse_jaas_config(f"  {PLAIN}   optional username=bob password='x y' ;") == \
        (PLAIN, {"username": "bob", "password": "x y"})
    assert parse_jaas_config(f"{PLAIN} required username=bob, password=x;") == \
        "malformed: options are name=\"value\" pairs separated by spaces (one login module only)"
    assert parse_jaas_config(f"{PLAIN} Required\nusername=bob\tpassword=\"a b\\\\c\";") == \
        (PLAIN, {"username": "bob", "password": "a b\\c"})


@pytest.mark.parametrize(("keys", "key", "fragment"), [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": JAAS.replace(SCRAM, PLAIN)},
     "sasl.jaas.config", "PlainLoginModule does not go with sasl.mechanism SCRAM-SHA-256"),
    ({"security.protocol": "SASL_SSL", "sasl.jaas.config": JAAS}, "sasl.jaas.config", "needs sasl.mechanism"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "security.protocol", "needs credentials"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism", "GSSAPI is not translated"),
    ({"security.protocol": "TLS"}, "security.protocol", "must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": JAAS}, "sasl.mechanism", "has no effect unless"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": JAAS.replace(SCRAM, PLAIN),
      "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM"},
     "ssl.truststore.location", "has no effect unless security.protocol is SSL or SASL_SSL"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/t.jks"}, "ssl.truststore.location",
     "keytool -exportcert -rfc"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/t.p12", "ssl.truststore.type": "PKCS12"},
     "ssl.truststore.type", "openssl pkcs12 -in truststore.p12 -nokeys"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM",
      "ssl.truststore.password": SECRET}, "ssl.truststore.password", "takes no password"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/k.jks", "ssl.keystore.password": SECRET},
     "ssl.keystore.location", "keytool -importkeystore"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/k.p12", "ssl.keystore.type": "PKCS12",
      "ssl.keystore.password": "a", "ssl.key.password": "b"}, "ssl.key.password", "give the same"),
    ({"security.protocol": "SSL", "ssl.keystore.type": "PEM", "ssl.keystore.key": "k"}, "ssl.keystore.key",
     "needs ssl.keystore.certificate.chain"),
    ({"security.protocol": "SSL", "ssl.enabled.protocols": "TLSv1.2"}, "ssl.enabled.protocols", "not supported"),
    ({"security.protocol": "SSL", "ssl.truststore.certificates": "-----BEGIN"}, "ssl.truststore.certificates",
     "needs ssl.truststore.type=PEM"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
     "ssl.endpoint.identification.algorithm", "must be https or empty"),
    ({"sasl.username": "bob"}, "sasl.username", "librdkafka's own settings go under stream.kafka.consumer.prop."),
    ({"stream.kafka.ssl.server.certificate": "MIIB"}, "stream.kafka.ssl.server.certificate", "PEM files"),
    ({"stream.kafka.consumer.prop.ssl.keymanager.algorithm": "SunX509"},
     "stream.kafka.consumer.prop.ssl.keymanager.algorithm", "Java key manager"),
])
def test_settings_that_cannot_be_honoured_are_refused_by_name(keys: dict[str, str], key: str, fragment: str) -> None:
    _, issues = translate(**keys)
    assert key in [k for k, _ in issues], issues
    message = dict(issues)[key]
    assert fragment in message
    assert SECRET not in message


def test_pem_and_pkcs12_stores() -> None:
    settings, issues = translate(**{
        "security.protocol": "SSL", "ssl.truststore.certificates": "CA-PEM", "ssl.truststore.type": "pem",
        "ssl.keystore.location": "/client.pem", "ssl.keystore.type": "PEM", "ssl.key.password": "kp",
        "ssl.endpoint.identification.algorithm": ""})
    assert issues == []
    assert settings == {"security.protocol": "SSL", "ssl.ca.pem": "CA-PEM", "ssl.certificate.location": "/client.pem",
                        "ssl.key.location": "/client.pem", "ssl.key.password": "kp",
                        "ssl.endpoint.identification.algorithm": "none"}
    settings, issues = translate(**{
        "security.protocol": "SSL", "ssl.keystore.location": "/client.p12", "ssl.keystore.type": "PKCS12",
        "ssl.keystore.password": "sp", "ssl.key.password": "sp"})
    assert issues == []
    assert settings == {"security.protocol": "SSL", "ssl.keystore.location": "/client.p12",
                        "ssl.keystore.password": "sp"}
    settings, issues = translate(**{
        "security.protocol": "SSL", "ssl.keystore.type": "PEM", "ssl.keystore.key": "KEY",
        "ssl.keystore.certificate.chain": "CHAIN"})
    assert issues == [] and settings["ssl.key.pem"] == "KEY" and settings["ssl.certificate.pem"] == "CHAIN"


def test_consumer_prop_keystore_follows_kafka_once_a_type_is_given() -> None:
    prefix = "stream.kafka.consumer.prop."
    settings, issues = translate(**{prefix + "security.protocol": "SSL", prefix + "ssl.keystore.location": "/c.pem",
                                    prefix + "ssl.keystore.type": "PEM"})
    assert issues == []
    assert settings["ssl.certificate.location"] == "/c.pem" and "ssl.keystore.location" not in settings


def test_stream_config_reports_every_security_issue_with_its_path() -> None:
    doc = {"tableName": "t", "tableType": "REALTIME", "tableIndexConfig": {"streamConfigs": {
        **BASE, "security.protocol": "SSL", "ssl.truststore.location": "/t.jks", "ssl.cipher.suites": "X"}}}
    from cuvee.config import TableConfig

    with pytest.raises(ConfigValidationError) as caught:
        TableConfig.from_json(doc)
    paths = {issue.path for issue in caught.value.issues}
    assert paths == {"$.tableIndexConfig.streamConfigs['ssl.truststore.location']",
                     "$.tableIndexConfig.streamConfigs['ssl.cipher.suites']"}


def test_pinots_isolation_level_key_sets_librdkafkas() -> None:
    assert translate(**{"stream.kafka.isolation.level": "READ_UNCOMMITTED"}) == \
        ({"isolation.level": "read_uncommitted"}, [])
    assert translate(**{"stream.kafka.isolation.level": "read_committed",
                        "stream.kafka.consumer.prop.isolation.level": "read_committed"})[1] == []
    assert translate(**{"stream.kafka.isolation.level": "read_committed",
                        "stream.kafka.consumer.prop.isolation.level": "read_uncommitted"})[1] == [
        ("stream.kafka.isolation.level", "conflicts with stream.kafka.consumer.prop.isolation.level; give only one "
                                         "of them")]
    assert translate(**{"stream.kafka.isolation.level": "dirty"})[1] == [
        ("stream.kafka.isolation.level", "must be read_committed or read_uncommitted")]
