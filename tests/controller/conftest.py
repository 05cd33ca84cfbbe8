"""The controller tests' fixtures (defined with their helpers in test_controller_support.py): the metadata store
URI, a log directory, an observer session, controllers started on demand, a leader, and fault points reset."""

from tests.controller.test_controller_support import (  # noqa: F401  (fixtures, found by name)
    _reset_faults,
    leader,
    log_dir,
    meta_uri,
    side_store,
    start_controller,
)
