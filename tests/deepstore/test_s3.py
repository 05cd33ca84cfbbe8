"""What only the S3 deep store has to say (the shared contract is test_conformance.py, run on S3 too)."""

from __future__ import annotations

import pytest

from cuvee.deepstore import open_deepstore
from cuvee.spi.deepstore import DeepStoreError, InvalidKeyError


def test_question_marks_are_refused_and_an_outage_is_not_read_as_absence(moto_s3, local_file) -> None:  # noqa: ANN001
    from cuvee.testing.moto_s3 import MotoS3

    store = open_deepstore(f"s3://{moto_s3.bucket}/q", moto_s3.settings)
    with pytest.raises(InvalidKeyError):
        store.put(local_file("x", b"x"), "x.tar.zst?versionId=1")
    with MotoS3(bucket="down") as own:
        down = open_deepstore("s3://down/p", own.settings)
        down.put(local_file("y", b"y"), "y")
        own.stop()
        with pytest.raises(DeepStoreError):
            down.exists("y")
