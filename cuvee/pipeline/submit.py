"""``spark-submit`` entry point for the ingest job: the same options as ``cuvee pipeline ingest``, with the
master taken from spark-submit's own flags::

    spark-submit --master spark://host:7077 --py-files cuvee.zip -m cuvee.pipeline.submit \\
        --controller http://ctl:9000 --table sales --input s3a://bucket/sales/

(or ``spark-submit .../cuvee/pipeline/submit.py ...`` with Cuvee installed on every node)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from cuvee.cli.pipeline_cmd import add_ingest_arguments, options_from, run_and_report
    from cuvee.errors import CuveeError
    from cuvee.pipeline.session import spark_session

    parser = argparse.ArgumentParser(prog="cuvee.pipeline.submit", description="ingest files into an OFFLINE table")
    add_ingest_arguments(parser, with_master=False)
    args = parser.parse_args(argv)
    try:
        return run_and_report(spark_session(None), options_from(args))
    except CuveeError as exc:
        print(f"cuvee: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
