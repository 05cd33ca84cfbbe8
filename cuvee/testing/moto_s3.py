"""moto's S3 server on loopback for tests and local clusters: ``with MotoS3() as s3: s3.settings, s3.bucket``.

moto keeps its buckets in the process, not in the server: ``stop()`` makes S3 unreachable (an outage) and
``start()`` brings it back on the same port with every object still there.
"""

from __future__ import annotations

import logging
from typing import Any

from cuvee.deepstore.s3 import S3Settings


class MotoS3:
    """Starts ``moto.server.ThreadedMotoServer`` on 127.0.0.1 (a free port) and creates one bucket."""

    def __init__(self, bucket: str = "cuvee-test"):
        self.bucket = bucket
        self.port = 0
        self._server: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def settings(self) -> S3Settings:
        return S3Settings(endpoint_url=self.url, region="us-east-1", access_key_id="test", secret_access_key="test",
                          connect_timeout_seconds=1.0, max_attempts=2)

    def environment(self) -> dict[str, str]:
        """The AWS variables that reach this server (for child processes and Spark executors)."""
        return {"AWS_ENDPOINT_URL": self.url, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                "AWS_REGION": "us-east-1"}

    def start(self) -> MotoS3:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self.port = self._server._server.server_port
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> MotoS3:
        self.start()
        import boto3

        boto3.client("s3", endpoint_url=self.url, region_name="us-east-1", aws_access_key_id="test",
                     aws_secret_access_key="test").create_bucket(Bucket=self.bucket)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
