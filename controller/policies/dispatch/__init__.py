"""dispatch (ZEGO's real-time dispatch for cross-region live video): the pure decision logic."""

from .policies import POLICIES

__all__ = ["POLICIES"]
