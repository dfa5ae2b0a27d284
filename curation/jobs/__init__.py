"""The job protocol: every stage (ingest, class filter, extraction, duplicate search, export,
unit tests, evaluation) is a kind with plan / process(chunk) / finalize steps, and one runner
gives them all the same failure handling, progress, heartbeat and chunk leases, stale
detection and resume, and one rule for running inline or on workers. See docs/jobs.md."""
from curation.jobs.heartbeat import is_stale, silent_for, stale_filter, state
from curation.jobs.protocol import STEPS, JobKind, kind_of, register_kind, registered_kinds, single_step
from curation.jobs.runner import (
                                  JobActive,
                                  JobNotResumable,
                                  Resumed,
                                  check_resumable,
                                  describe,
                                  dispatch,
                                  enqueue_on_commit,
                                  on_workers,
                                  queued_message,
                                  resume,
                                  run_inline,
                                  run_step,
                                  where_queued,
)

__all__ = [
    "STEPS", "JobActive", "JobKind", "JobNotResumable", "Resumed", "check_resumable", "describe", "dispatch", "enqueue_on_commit", "is_stale",
    "kind_of", "on_workers", "register_kind", "registered_kinds", "resume", "run_inline", "run_step", "silent_for",
    "single_step", "stale_filter", "state", "where_queued", "queued_message",
]
