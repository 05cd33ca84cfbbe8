"""Pinot's Kafka security keys, translated into librdkafka's settings: a pure function, no I/O.

Pinot's Kafka plugin hands its whole ``streamConfigs`` map to the Java Kafka client, so its docs give the client's
security keys at the top level of ``streamConfigs`` (``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config``, ``ssl.truststore.*``, ``ssl.keystore.*``). Cuvee's Kafka client is librdkafka, which names
and shapes some of them differently, so ``kafka_client_properties`` reads them (at the top level, or as
``stream.kafka.consumer.prop.<key>``) and returns librdkafka's settings:

- ``security.protocol``: the same four values; ``sasl.mechanism``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI and
  OAUTHBEARER only as librdkafka's own setup, under ``stream.kafka.consumer.prop.*``: Kafka's JAAS login modules for
  them are not translated).
- ``sasl.jaas.config`` (``PlainLoginModule`` or ``ScramLoginModule`` with ``username`` and ``password``) becomes
  ``sasl.username`` / ``sasl.password``; the login module must match the mechanism.
- PEM stores: ``ssl.truststore.location`` of type PEM becomes ``ssl.ca.location``, ``ssl.truststore.certificates``
  ``ssl.ca.pem``; a PEM key store (a file with the private key and its certificate chain) becomes
  ``ssl.certificate.location`` and ``ssl.key.location`` (the same file), inline ``ssl.keystore.key`` /
  ``ssl.keystore.certificate.chain`` become ``ssl.key.pem`` / ``ssl.certificate.pem``; ``ssl.key.password`` stays.
- A PKCS12 key store goes to librdkafka as it is (``ssl.keystore.location`` / ``ssl.keystore.password``).
- JKS stores (Kafka's default type) and PKCS12 trust stores cannot be read by librdkafka: they are refused with
  the command that converts them.
- ``ssl.endpoint.identification.algorithm``: ``https``, or empty (Kafka's "off") as librdkafka's ``none``.

Every other ``stream.kafka.consumer.prop.*`` key passes through to librdkafka unchanged (its own names, e.g.
``sasl.username``). A key that cannot be honoured is refused by name, never silently dropped; a security setting
that would have no effect (SASL keys without a SASL protocol, SSL keys without an SSL one) is refused too.

Messages name keys, never values: a malformed ``sasl.jaas.config`` is reported without echoing the password.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

CONSUMER_PROP_PREFIX = "stream.kafka.consumer.prop."

PROTOCOL = "security.protocol"
MECHANISM = "sasl.mechanism"
JAAS = "sasl.jaas.config"
TRUSTSTORE_LOCATION = "ssl.truststore.location"
TRUSTSTORE_TYPE = "ssl.truststore.type"
TRUSTSTORE_PASSWORD = "ssl.truststore.password"
TRUSTSTORE_CERTIFICATES = "ssl.truststore.certificates"
KEYSTORE_LOCATION = "ssl.keystore.location"
KEYSTORE_TYPE = "ssl.keystore.type"
KEYSTORE_PASSWORD = "ssl.keystore.password"
KEY_PASSWORD = "ssl.key.password"
KEYSTORE_KEY = "ssl.keystore.key"
KEYSTORE_CHAIN = "ssl.keystore.certificate.chain"
ENDPOINT_IDENTIFICATION = "ssl.endpoint.identification.algorithm"
ISOLATION_LEVEL = "stream.kafka.isolation.level"  # Pinot's own key for the consumer's isolation level

# The Kafka (Java) client keys Cuvee translates, wherever they are given.
TRANSLATED_KEYS = (PROTOCOL, MECHANISM, JAAS, TRUSTSTORE_LOCATION, TRUSTSTORE_TYPE, TRUSTSTORE_PASSWORD,
                   TRUSTSTORE_CERTIFICATES, KEYSTORE_LOCATION, KEYSTORE_TYPE, KEYSTORE_PASSWORD, KEY_PASSWORD,
                   KEYSTORE_KEY, KEYSTORE_CHAIN, ENDPOINT_IDENTIFICATION)
# Java-only names librdkafka does not know: translated (or refused) under stream.kafka.consumer.prop.* too.
_JAVA_ONLY = {JAAS, TRUSTSTORE_LOCATION, TRUSTSTORE_TYPE, TRUSTSTORE_PASSWORD, TRUSTSTORE_CERTIFICATES,
              KEYSTORE_TYPE, KEYSTORE_KEY, KEYSTORE_CHAIN}
# Java client keys that have no librdkafka equivalent: refused with the reason.
_REFUSED_JAVA = {
    "ssl.protocol": "librdkafka negotiates the TLS version itself (OpenSSL's defaults)",
    "ssl.enabled.protocols": "librdkafka negotiates the TLS version itself (OpenSSL's defaults)",
    "ssl.keymanager.algorithm": "it names a Java key manager",
    "ssl.trustmanager.algorithm": "it names a Java trust manager",
    "ssl.secure.random.implementation": "it names a Java random source",
    "ssl.provider": "it names a Java security provider",
    "ssl.engine.factory.class": "it names a Java class",
    "sasl.login.class": "it names a Java class",
    "sasl.login.callback.handler.class": "it names a Java class",
    "sasl.client.callback.handler.class": "it names a Java class",
}
_SECURITY_PREFIXES = ("security.", "sasl.", "ssl.")
# Pinot's own base64 certificate keys (its Kafka plugin writes them into a Java key store).
_PINOT_SSL_PREFIX = "stream.kafka.ssl."

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SASL_PROTOCOLS = {"SASL_PLAINTEXT", "SASL_SSL"}
_SSL_PROTOCOLS = {"SSL", "SASL_SSL"}
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LIBRDKAFKA_ONLY_MECHANISMS = {"GSSAPI", "OAUTHBEARER"}
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
_JAAS_FLAGS = {"required", "requisite", "sufficient", "optional"}
_STORE_TYPES = ("PEM", "PKCS12", "JKS")

TRUSTSTORE_CONVERSION = (
    "convert it to a PEM file of the CA certificates and give that file with ssl.truststore.type=PEM, e.g. "
    "`keytool -exportcert -rfc -keystore truststore.jks -alias <alias> -file ca.pem` (a PKCS12 store: "
    "`openssl pkcs12 -in truststore.p12 -nokeys -out ca.pem`)")
PEM_KEYSTORE_CONVERSION = (
    "convert it to one PEM file of the key and its certificates (a JKS store first to PKCS12: `keytool "
    "-importkeystore -srckeystore keystore.jks -destkeystore keystore.p12 -deststoretype PKCS12`; then `openssl "
    "pkcs12 -in keystore.p12 -nodes -out keystore.pem`) and give that file with type PEM")
KEYSTORE_CONVERSION = (
    "convert it to PKCS12 (`keytool -importkeystore -srckeystore keystore.jks -destkeystore keystore.p12 "
    "-deststoretype PKCS12`, then ssl.keystore.type=PKCS12) or to one PEM file of the key and its certificates "
    "(`openssl pkcs12 -in keystore.p12 -nodes -out keystore.pem`, then ssl.keystore.type=PEM)")


@dataclass(frozen=True)
class SettingIssue:
    """A key of ``streamConfigs`` that cannot be honoured, and why (never its value)."""

    key: str
    message: str


@dataclass
class _Sources:
    """Where each translated key was given: its value and the streamConfigs key it came from."""

    values: dict[str, str]
    origin: dict[str, str]

    def get(self, key: str) -> str | None:
        return self.values.get(key)

    def at(self, key: str) -> str:
        return self.origin.get(key, key)


def kafka_client_properties(stream_configs: Mapping[str, str]) -> tuple[dict[str, str], list[SettingIssue]]:
    """librdkafka settings for a ``streamType: kafka`` map: every ``stream.kafka.consumer.prop.*`` key (prefix
    removed) with the Kafka client's security keys translated, and the problems found (empty when usable)."""
    issues: list[SettingIssue] = []
    passthrough: dict[str, str] = {}
    sources = _Sources({}, {})
    for key, value in stream_configs.items():
        key, value = str(key), str(value)
        if key.startswith(_PINOT_SSL_PREFIX):
            issues.append(SettingIssue(key, "Pinot's base64 certificate keys are not supported: write the "
                                            "certificates to PEM files and give ssl.truststore.location (and "
                                            "ssl.keystore.location) with type PEM"))
        elif key.startswith(CONSUMER_PROP_PREFIX):
            name = key[len(CONSUMER_PROP_PREFIX):]
            if name in TRANSLATED_KEYS and (name in _JAVA_ONLY or name in (PROTOCOL, MECHANISM, ENDPOINT_IDENTIFICATION)
                                            or _java_keystore(stream_configs)):
                _take(sources, name, key, value, issues)
            else:
                passthrough[name] = value
        elif key in TRANSLATED_KEYS:
            _take(sources, key, key, value, issues)
        elif key in _REFUSED_JAVA:
            issues.append(SettingIssue(key, f"not supported: {_REFUSED_JAVA[key]}"))
        elif key.startswith(_SECURITY_PREFIXES):
            issues.append(SettingIssue(key, "not a Kafka client setting Cuvee translates; librdkafka's own settings "
                                            f"go under {CONSUMER_PROP_PREFIX}*"))
    for name in sorted(set(passthrough) & set(_REFUSED_JAVA)):
        issues.append(SettingIssue(CONSUMER_PROP_PREFIX + name, f"not supported: {_REFUSED_JAVA[name]}"))
        del passthrough[name]
    settings = dict(passthrough)
    protocol = _protocol(sources, settings, issues)
    _sasl(sources, settings, protocol, issues)
    _truststore(sources, settings, protocol, issues)
    _keystore(sources, settings, protocol, issues)
    endpoint = sources.get(ENDPOINT_IDENTIFICATION)
    if endpoint is not None:
        choice = {"": "none", "https": "https", "none": "none"}.get(endpoint.strip().lower())
        if choice is None:
            issues.append(SettingIssue(sources.at(ENDPOINT_IDENTIFICATION), "must be https or empty (no host name "
                                                                            "check)"))
        else:
            settings[ENDPOINT_IDENTIFICATION] = choice
    _isolation(stream_configs, settings, issues)
    return settings, issues


def _isolation(stream_configs: Mapping[str, str], settings: dict[str, str], issues: list[SettingIssue]) -> None:
    """Pinot's ``stream.kafka.isolation.level`` is librdkafka's ``isolation.level`` (whose default,
    read_committed, leaves out aborted transactions' messages; the Java client's default is read_uncommitted)."""
    value = stream_configs.get(ISOLATION_LEVEL)
    if value is None:
        return
    level = str(value).strip().lower()
    if level not in ("read_committed", "read_uncommitted"):
        issues.append(SettingIssue(ISOLATION_LEVEL, "must be read_committed or read_uncommitted"))
    elif settings.get("isolation.level", level) != level:
        issues.append(SettingIssue(ISOLATION_LEVEL, f"conflicts with {CONSUMER_PROP_PREFIX}isolation.level; give "
                                                    "only one of them"))
    else:
        settings["isolation.level"] = level


def _java_keystore(stream_configs: Mapping[str, str]) -> bool:
    """Whether ``ssl.keystore.location``/``password`` and ``ssl.key.password`` under consumer.prop mean Kafka's
    (typed) key store rather than librdkafka's PKCS12 one: they do once a key store type is given anywhere."""
    return KEYSTORE_TYPE in stream_configs or CONSUMER_PROP_PREFIX + KEYSTORE_TYPE in stream_configs


def _take(sources: _Sources, name: str, key: str, value: str, issues: list[SettingIssue]) -> None:
    known = sources.values.get(name)
    if known is not None and known != value:
        issues.append(SettingIssue(key, f"conflicts with {sources.at(name)!r}; give only one of them"))
        return
    sources.values[name] = value
    sources.origin.setdefault(name, key)


def _protocol(sources: _Sources, settings: dict[str, str], issues: list[SettingIssue]) -> str:
    raw = sources.get(PROTOCOL)
    if raw is None:
        return "PLAINTEXT"
    protocol = raw.strip().upper()
    if protocol not in _PROTOCOLS:
        issues.append(SettingIssue(sources.at(PROTOCOL), f"must be one of {', '.join(_PROTOCOLS)}"))
        return "PLAINTEXT"
    settings[PROTOCOL] = protocol
    return protocol


def _sasl(sources: _Sources, settings: dict[str, str], protocol: str, issues: list[SettingIssue]) -> None:
    raw_mechanism, jaas = sources.get(MECHANISM), sources.get(JAAS)
    if protocol not in _SASL_PROTOCOLS:
        for key in (MECHANISM, JAAS):
            if sources.get(key) is not None:
                issues.append(SettingIssue(sources.at(key), f"has no effect unless {PROTOCOL} is SASL_PLAINTEXT or "
                                                            "SASL_SSL"))
        return
    if raw_mechanism is None:
        raw_mechanism = settings.get("sasl.mechanisms")  # librdkafka's own spelling, under consumer.prop
    mechanism = None if raw_mechanism is None else raw_mechanism.strip().upper()
    if mechanism in _LIBRDKAFKA_ONLY_MECHANISMS:
        # refused when given the Kafka way: with a JAAS config, or as the top-level key (at() names the key it came
        # from, and its own name when it was never given)
        if jaas is not None or (sources.get(MECHANISM) is not None and sources.at(MECHANISM) == MECHANISM):
            issues.append(SettingIssue(sources.at(MECHANISM) if sources.get(MECHANISM) else sources.at(JAAS),
                                       f"{mechanism} is not translated from Kafka's settings: give librdkafka's own "
                                       f"(sasl.kerberos.*, sasl.oauthbearer.*) under {CONSUMER_PROP_PREFIX}*"))
        elif sources.get(MECHANISM) is not None:
            settings[MECHANISM] = mechanism
        return
    if mechanism is not None and mechanism not in _MECHANISMS:
        issues.append(SettingIssue(sources.at(MECHANISM), f"must be one of {', '.join(_MECHANISMS)}"))
        return
    if mechanism is not None and sources.get(MECHANISM) is not None:
        settings[MECHANISM] = mechanism
    if jaas is None:
        if mechanism is not None and "sasl.username" not in settings:
            issues.append(SettingIssue(sources.at(PROTOCOL), f"SASL {mechanism} needs credentials: {JAAS} (or "
                                                             "librdkafka's sasl.username and sasl.password under "
                                                             f"{CONSUMER_PROP_PREFIX}*)"))
        return
    if mechanism is None:
        issues.append(SettingIssue(sources.at(JAAS), f"needs {MECHANISM} (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; "
                                                     "Kafka's default, GSSAPI, is not translated)"))
        return
    parsed = parse_jaas_config(jaas)
    if isinstance(parsed, str):
        issues.append(SettingIssue(sources.at(JAAS), parsed))
        return
    module, options = parsed
    if mechanism not in _LOGIN_MODULES[module]:
        issues.append(SettingIssue(sources.at(JAAS), f"{module.rsplit('.', 1)[-1]} does not go with {MECHANISM} "
                                                     f"{mechanism}"))
        return
    for name in ("sasl.username", "sasl.password"):
        if name in settings:
            issues.append(SettingIssue(CONSUMER_PROP_PREFIX + name, f"conflicts with {sources.at(JAAS)!r}; give only "
                                                                    "one of them"))
            return
    settings["sasl.username"] = options["username"]
    settings["sasl.password"] = options["password"]


# One JAAS option: name=value, the value quoted ("..." or '...', with backslash escapes) or a bare word.
_OPTION = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*=\s*'
                     r'(?:"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'|([^\s;"\',=]+))(?=\s|$)')


def parse_jaas_config(text: str) -> tuple[str, dict[str, str]] | str:
    """``(login module, {"username", "password"})`` of one client login module entry, or the reason it cannot be
    used. The reason never contains any part of ``text`` but the login module's class name."""
    body = text.strip()
    if not body.endswith(";"):
        return "malformed: a JAAS entry ends with ';'"
    body = body[:-1].strip()
    parts = body.split(None, 2)
    if len(parts) < 2:
        return "malformed: expected '<LoginModule class> required username=\"...\" password=\"...\";'"
    module, flag = parts[0], parts[1]
    if module not in _LOGIN_MODULES:
        known = ", ".join(sorted(_LOGIN_MODULES))
        return f"login module is not supported (supported: {known})" if re.fullmatch(r"[\w.$]+", module) \
            else "malformed: expected '<LoginModule class> required username=\"...\" password=\"...\";'"
    if flag.lower() not in _JAAS_FLAGS:
        return "malformed: the login module's flag must be required, requisite, sufficient or optional"
    rest = parts[2] if len(parts) > 2 else ""
    options: dict[str, str] = {}
    position = 0
    while position < len(rest):
        if not rest[position:].strip():
            break
        match = _OPTION.match(rest, position)
        if match is None:
            return "malformed: options are name=\"value\" pairs separated by spaces (one login module only)"
        name = match.group(1)
        quoted = match.group(2) if match.group(2) is not None else match.group(3)
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else match.group(4)
        if name in options:
            return f"malformed: option {name!r} is given twice"
        options[name] = value
        position = match.end()
    unknown = sorted(set(options) - {"username", "password"})
    if unknown:
        return f"options {unknown} are not supported (a client entry takes username and password)"
    for name in ("username", "password"):
        if not options.get(name):
            return f"the {name} option is missing or empty"
    return module, options


def _ssl_store(sources: _Sources, keys: tuple[str, ...], type_key: str, protocol: str,
               issues: list[SettingIssue]) -> tuple[list[str], str | None] | None:
    """The store keys given and the store's type (upper case, None if not given); None when there is nothing to
    translate (no key given, or issues reported: keys without an SSL protocol, an unknown type)."""
    given = [key for key in keys if sources.get(key) is not None]
    if not given:
        return None
    if protocol not in _SSL_PROTOCOLS:
        issues.extend(SettingIssue(sources.at(key), f"has no effect unless {PROTOCOL} is SSL or SASL_SSL")
                      for key in given)
        return None
    raw = sources.get(type_key)
    store_type = None if raw is None else raw.strip().upper()
    if store_type is not None and store_type not in _STORE_TYPES:
        issues.append(SettingIssue(sources.at(type_key), f"must be one of {', '.join(_STORE_TYPES)}"))
        return None
    return given, store_type


def _truststore(sources: _Sources, settings: dict[str, str], protocol: str, issues: list[SettingIssue]) -> None:
    keys = (TRUSTSTORE_LOCATION, TRUSTSTORE_TYPE, TRUSTSTORE_PASSWORD, TRUSTSTORE_CERTIFICATES)
    store = _ssl_store(sources, keys, TRUSTSTORE_TYPE, protocol, issues)
    if store is None:
        return
    given, store_type = store
    location, inline = sources.get(TRUSTSTORE_LOCATION), sources.get(TRUSTSTORE_CERTIFICATES)
    where = sources.at(TRUSTSTORE_TYPE if store_type is not None else TRUSTSTORE_LOCATION)
    if location is not None and inline is not None:
        issues.append(SettingIssue(sources.at(TRUSTSTORE_CERTIFICATES), f"give {TRUSTSTORE_LOCATION} or this, not "
                                                                        "both"))
        return
    if location is None and inline is None:
        issues.append(SettingIssue(sources.at(given[0]), f"needs {TRUSTSTORE_LOCATION} (a PEM file of CA "
                                                         "certificates)"))
        return
    if store_type != "PEM":
        if inline is not None and store_type is None:
            issues.append(SettingIssue(sources.at(TRUSTSTORE_CERTIFICATES), f"needs {TRUSTSTORE_TYPE}=PEM"))
        else:
            named = store_type or "JKS (Kafka's default when ssl.truststore.type is not given)"
            issues.append(SettingIssue(where, f"a {named} trust store cannot be read by librdkafka: "
                                              f"{TRUSTSTORE_CONVERSION}"))
        return
    if sources.get(TRUSTSTORE_PASSWORD) is not None:
        issues.append(SettingIssue(sources.at(TRUSTSTORE_PASSWORD), "a PEM trust store takes no password (Kafka "
                                                                     "refuses one too); remove it"))
        return
    if location is not None:
        settings["ssl.ca.location"] = location
    else:
        settings["ssl.ca.pem"] = inline  # type: ignore[assignment]


def _keystore(sources: _Sources, settings: dict[str, str], protocol: str, issues: list[SettingIssue]) -> None:
    keys = (KEYSTORE_LOCATION, KEYSTORE_TYPE, KEYSTORE_PASSWORD, KEY_PASSWORD, KEYSTORE_KEY, KEYSTORE_CHAIN)
    store = _ssl_store(sources, keys, KEYSTORE_TYPE, protocol, issues)
    if store is None:
        return
    given, store_type = store
    location = sources.get(KEYSTORE_LOCATION)
    key, chain = sources.get(KEYSTORE_KEY), sources.get(KEYSTORE_CHAIN)
    store_password, key_password = sources.get(KEYSTORE_PASSWORD), sources.get(KEY_PASSWORD)
    if key is not None or chain is not None:
        if location is not None:
            issues.append(SettingIssue(sources.at(KEYSTORE_KEY if key is not None else KEYSTORE_CHAIN),
                                       f"give {KEYSTORE_LOCATION} or the inline key and chain, not both"))
        elif key is None or chain is None:
            missing = KEYSTORE_KEY if key is None else KEYSTORE_CHAIN
            issues.append(SettingIssue(sources.at(KEYSTORE_CHAIN if key is None else KEYSTORE_KEY),
                                       f"needs {missing} too"))
        elif store_type != "PEM":
            issues.append(SettingIssue(sources.at(KEYSTORE_KEY), f"needs {KEYSTORE_TYPE}=PEM"))
        elif store_password is not None:
            issues.append(SettingIssue(sources.at(KEYSTORE_PASSWORD), "a PEM key store takes no store password "
                                                                       f"(the key's is {KEY_PASSWORD}); remove it"))
        else:
            settings["ssl.key.pem"], settings["ssl.certificate.pem"] = key, chain
            if key_password is not None:
                settings[KEY_PASSWORD] = key_password
        return
    if location is None:
        issues.append(SettingIssue(sources.at(given[0]), f"needs {KEYSTORE_LOCATION} (the client's key and "
                                                         "certificate)"))
        return
    if store_type == "PEM":
        if store_password is not None:
            issues.append(SettingIssue(sources.at(KEYSTORE_PASSWORD), "a PEM key store takes no store password "
                                                                       f"(the key's is {KEY_PASSWORD}); remove it"))
            return
        settings["ssl.certificate.location"] = settings["ssl.key.location"] = location
        if key_password is not None:
            settings[KEY_PASSWORD] = key_password
    elif store_type == "PKCS12":
        if key_password is not None and key_password != store_password:
            issues.append(SettingIssue(sources.at(KEY_PASSWORD), "librdkafka opens a PKCS12 key with the store's "
                                                                  f"password: give the same as {KEYSTORE_PASSWORD}"))
            return
        settings[KEYSTORE_LOCATION] = location
        if store_password is not None:
            settings[KEYSTORE_PASSWORD] = store_password
    else:
        named = store_type or "JKS (Kafka's default when ssl.keystore.type is not given)"
        issues.append(SettingIssue(sources.at(KEYSTORE_TYPE if store_type else KEYSTORE_LOCATION),
                                   f"a {named} key store cannot be read by librdkafka: {KEYSTORE_CONVERSION}"))
