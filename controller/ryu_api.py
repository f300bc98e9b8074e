"""The Ryu API, from os-ken where it is installed (Python 3.11+), else from Ryu.

os-ken is the maintained fork of Ryu with the same API under another package name; importing
through this module is all it takes for edgebed's apps to load under either (``ryu-manager
controller/app.py`` where Ryu still runs, ``python -m controller`` everywhere).
"""

from __future__ import annotations

try:
    from os_ken import cfg
    from os_ken.base import app_manager
    from os_ken.base.app_manager import OSKenApp as App
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import (CONFIG_DISPATCHER, DEAD_DISPATCHER,
                                           MAIN_DISPATCHER, set_ev_cls)
    from os_ken.lib import hub
    from os_ken.lib.packet import arp, ethernet, ipv4, packet
    from os_ken.ofproto import ofproto_v1_3

    FRAMEWORK = "os-ken"
except ImportError:  # pragma: no cover - exercised only where Ryu is installed instead
    from ryu import cfg
    from ryu.base import app_manager
    from ryu.base.app_manager import RyuApp as App
    from ryu.controller import ofp_event
    from ryu.controller.handler import (CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER,
                                        set_ev_cls)
    from ryu.lib import hub
    from ryu.lib.packet import arp, ethernet, ipv4, packet
    from ryu.ofproto import ofproto_v1_3

    FRAMEWORK = "ryu"

__all__ = ["App", "CONFIG_DISPATCHER", "DEAD_DISPATCHER", "FRAMEWORK", "MAIN_DISPATCHER",
           "app_manager", "arp", "cfg", "ethernet", "hub", "ipv4", "ofp_event", "ofproto_v1_3",
           "packet", "set_ev_cls"]
