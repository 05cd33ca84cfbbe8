"""Cluster state: where it lives (``paths``), its records (``records``), typed compare-and-set access over the
metadata store (``store``), and the pure rules the controller applies to it: segment placement and commit steps
(``assignment``), auto-tuned row thresholds (``threshold``) and the external view (``external_view``)."""
