"""SDN controller apps (Ryu API, run on os-ken) and the pure-Python scheduling policies.

Scenarios select a controller with ``controller: {app: ...}``; today the only app is ``none``
(switches run standalone as learning switches).
"""
