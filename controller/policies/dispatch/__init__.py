"""dispatch (ZEGO's real-time dispatch for cross-region live video): the pure decision logic.

:mod:`.quality` judges paths by VIA's thresholds; :mod:`.access` places clients with a
synthetic IP-location database, ranks candidate media nodes and picks one from probes;
:mod:`.capacity` keeps K dispatch centers from overselling a node (tickets) or not (shared
capacity with stale reports), and redirects afterwards; :mod:`.routing` schedules single- or
multi-point with same-room spill-over, inserts relays and keeps hot-standby routes;
:mod:`.rooms` finds where a stream lives (broadcast or hint) and runs passive transcoding.
:mod:`.model` simulates the whole at model level; :mod:`.policies` is the :class:`Dispatch`
policy the controller runs. Nothing here imports Mininet, os-ken or the controller app.
"""

from .policies import POLICIES

__all__ = ["POLICIES"]
