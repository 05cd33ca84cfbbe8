"""The ``[tls]`` table of a role's config: serve HTTPS, and trust the cluster's certificates when calling the
other roles (docs/security.md).

    [tls]
    certfile = "/etc/cuvee/server.pem"   # this role's certificate chain (PEM); with keyfile: the role serves HTTPS
    keyfile = "/etc/cuvee/server.key"
    ca_file = "/etc/cuvee/ca.pem"        # the CA (or self-signed certificate) the roles' certificates chain to

Without ``certfile`` a role serves plain HTTP. ``ca_file`` is what this role trusts when it calls the others
(default: httpx's bundled CA list, or the file ``SSL_CERT_FILE`` names).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TlsConfig:
    certfile: str = ""
    keyfile: str = ""
    ca_file: str = ""

    def __post_init__(self) -> None:
        if bool(self.certfile) != bool(self.keyfile):
            raise ValueError("tls.certfile and tls.keyfile go together")
        for name in ("certfile", "keyfile", "ca_file"):
            value = getattr(self, name)
            if value and not Path(value).is_file():
                raise ValueError(f"tls.{name}: no such file {value!r}")
        if self.certfile:
            try:
                ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(self.certfile, self.keyfile)
            except (ssl.SSLError, OSError) as exc:
                raise ValueError(f"tls.certfile/keyfile cannot be loaded (not PEM, or a key that does not match): "
                                 f"{exc.__class__.__name__}") from None

    @property
    def serving(self) -> bool:
        return bool(self.certfile)

    def client_verify(self) -> ssl.SSLContext | bool:
        """What httpx's ``verify`` takes for calls to the other roles."""
        if not self.ca_file:
            return True
        return ssl.create_default_context(cafile=self.ca_file)
