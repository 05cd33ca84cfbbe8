"""Controller jobs (Pinot's ``CONTROLLER_JOBS``): a record of each reload and force commit, for their status
endpoints (``GET /segments/segmentReloadStatus/{jobId}``, ``GET /tables/forceCommitStatus/{jobId}``).

Kept per table (``ClusterPaths.jobs``, deleted with the table), the newest ``MAX_JOBS`` of them, with Pinot's
keys (``jobId``, ``jobType``, ``tableName``, ``submissionTimeMs``). Writing one is best effort, as in Pinot: the
job ran whether or not its record could be written, and the answer says which (``...ZKStorageStatus``).

Bounded: a job keeps counts beside its lists, and each job is cut to ``MAX_JOB_BYTES`` (``bounded``: its longest
list or map halved until it fits), so the table's node stays under DESIGN §13's 512 KB whatever the table's size
(Pinot stores every segment name of a force commit; 100 jobs of a 512-partition table made 1.7 MB here, past
ZooKeeper's 1 MB). A list cut short says so by its count: ``numberOfSegmentsForceCommitted`` beside
``segmentsForceCommitted``, ``forceCommittedCount`` beside ``forceCommitted``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import orjson

from cuvee.auth.policy import JOB_ID
from cuvee.cluster.records import ControllerJobs
from cuvee.cluster.store import ClusterStore
from cuvee.controller.errors import BadRequest, NotFound

log = logging.getLogger(__name__)

MAX_JOBS = 100
MAX_JOB_BYTES = 4_096  # one job's JSON: MAX_JOBS of them stay under 512 KB (DESIGN §13)
RELOAD = "RELOAD_SEGMENT"
FORCE_COMMIT = "FORCE_COMMIT"


def new_job_id() -> str:
    return str(uuid.uuid4())


def bounded(job: dict[str, Any], limit: int = MAX_JOB_BYTES) -> dict[str, Any]:
    """``job`` cut to at most ``limit`` bytes of JSON: its longest list or map halved (the first items kept)
    until it fits; the counts beside them say how many there were."""
    doc = dict(job)
    while len(orjson.dumps(doc)) > limit:
        cuttable = [key for key, value in doc.items() if isinstance(value, (list, dict)) and value]
        if not cuttable:
            raise ValueError(f"job {str(job.get('jobId'))[:64]} is over {limit} bytes without a list to cut")
        key = max(cuttable, key=lambda k: len(orjson.dumps(doc[k])))
        value = doc[key]
        doc[key] = value[:len(value) // 2] if isinstance(value, list) else dict(list(value.items())[:len(value) // 2])
    return doc


def record_job(store: ClusterStore, table: str, job: dict[str, Any]) -> bool:
    """Add ``job`` (``bounded``) to the table's jobs; False (logged) when the metadata store would not take it."""
    try:
        stored = bounded(job)
        store.update(ControllerJobs, store.paths.jobs(table), lambda jobs: jobs.added(stored, MAX_JOBS),
                     initial=ControllerJobs(table))
        return True
    except Exception:  # noqa: BLE001 - the job ran; only its record is missing
        log.exception("could not record %s job %s of %s", job.get("jobType"), job.get("jobId"), table)
        return False


def find_job(store: ClusterStore, job_id: str, job_type: str) -> dict[str, Any]:
    """The job of that id and type, from whichever table's jobs hold it (404 when none does)."""
    if not JOB_ID.fullmatch(job_id):
        raise BadRequest(f"job id {job_id[:64]!r} is not a job id")
    for table in store.children(store.paths.all_jobs):
        found = store.find(ControllerJobs, store.paths.jobs(table))
        job = found.record.job(job_id) if found is not None else None
        if job is not None and job.get("jobType") == job_type:
            return job
    raise NotFound(f"Failed to find controller job id: {job_id}")


def pinot_metadata(job: dict[str, Any]) -> dict[str, str]:
    """A job as Pinot answers its metadata: a map of strings (lists and objects as JSON text)."""
    return {key: value if isinstance(value, str) else orjson.dumps(value).decode() for key, value in job.items()}
