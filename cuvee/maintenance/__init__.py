"""Segment maintenance: Pinot's minion tasks (MergeRollupTask, RealtimeToOfflineSegmentsTask,
UpsertCompactionTask) run as Spark jobs. Task configs and planning are pure; the jobs use the batch pipeline's
segment builder and lineage replace; the controller keeps each task's watermarks."""
