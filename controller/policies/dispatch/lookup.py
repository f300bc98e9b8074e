"""One back-to-source lookup (dispatch, mechanism 5), without I/O: a dispatch center that does
not know a stream asks the other centers where it lives, by broadcast or by following a hint
(the center the streamer registered with), falling back to broadcast when the hinted center
says "not here". Shared by the model (``controller.policies.dispatch.rooms.Directory``, replies
after the centers' round-trip times) and by an agent (replies as real datagrams, some lost)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum


class LookupMode(str, Enum):
    BROADCAST = "broadcast"
    HINT = "hint"


class LookupState:
    """The lookup, asked at ``asker`` among ``centers``. ``done`` once a center said where the
    stream lives (``node``, ``center``), or every asked center said "not here" (``node`` None),
    or the retransmissions ran out (``failed``). ``fell_back``: a hint was followed and was
    stale, so the query went out by broadcast after all."""

    def __init__(self, asker: str, centers: Sequence[str], mode: LookupMode,
                 hint: str | None = None, timeout: float = 1.0, retries: int = 3):
        if hint is not None and hint not in centers:
            raise KeyError(f"hint names unknown center {hint!r}")
        if retries < 0 or timeout <= 0:
            raise ValueError("a lookup needs a positive timeout and retries >= 0")
        self.asker, self.centers, self.mode, self.hint = asker, tuple(centers), mode, hint
        self.timeout, self.retries = timeout, retries
        self.messages = self.retransmissions = self.round = 0
        self.node: str | None = None
        self.center: str | None = None
        self.done = self.failed = self.fell_back = False
        self._asked: set[str] = set()
        self._answered: set[str] = set()

    def start(self) -> list[str]:
        """The centers to query first."""
        if self.mode is LookupMode.HINT and self.hint is not None:
            if self.hint != self.asker:
                return self._ask([self.hint])
            # Stale, and known to be without asking anyone: straight to broadcast.
            self.fell_back = True
        return self._broadcast()

    def on_reply(self, center: str, found: bool, node: str | None) -> list[str]:
        """A reply from ``center``; the centers to query next. Replies from centers not asked,
        or a second one from the same center, are ignored (not counted)."""
        if center not in self._asked or center in self._answered:
            return []
        self._answered.add(center)
        self.messages += 1
        if self.done:
            return []
        if found:
            self.node, self.center, self.done = node, center, True
            return []
        if self.mode is LookupMode.HINT and center == self.hint and not self.fell_back:
            self.fell_back = True
            return self._broadcast()
        if self._answered >= self._asked:
            self.done = True
        return []

    def on_timeout(self) -> list[str]:
        """The timer fired: the unanswered centers to query again, or none (failed)."""
        if self.done:
            return []
        if self.round >= self.retries:
            self.done = self.failed = True
            return []
        self.round += 1
        again = sorted(self._asked - self._answered, key=self.centers.index)
        self.retransmissions += len(again)
        self.messages += len(again)
        return again

    def _broadcast(self) -> list[str]:
        others = [c for c in self.centers if c != self.asker and c not in self._asked]
        if not others:
            self.done = True
        return self._ask(others)

    def _ask(self, centers: list[str]) -> list[str]:
        self._asked.update(centers)
        self.messages += len(centers)
        return centers
