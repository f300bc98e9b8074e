"""Exceptions that end the threads an app starts, recorded like those of its event handlers
(:meth:`controller.app_logs.AppLogs.record`), so that they fail the run: os-ken's native hub
swallows what a ``hub.spawn`` thread raises, its eventlet hub only logs it, and Python prints
what ends a ``threading.Thread`` (or a ``hub.spawn_after`` timer) to the process's output.

Threads the framework starts for itself (from ``os_ken`` or ``ryu`` modules: its event loops,
its switch connections) are left as they are.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import traceback

FRAMEWORKS = ("os_ken", "ryu")
FALLBACK_LOGGER = "edgebed.controller"
_RECORDED = "_edgebed_recorded"  # marks an exception recorded already, which goes on up


def watch(hub, record) -> None:
    """From now on in this process, an exception that ends a thread goes to
    ``record(app, text, logger)`` (``text``: the thread and the traceback): every
    ``threading.Thread``'s, and those of ``hub.spawn`` and ``hub.spawn_after`` (``hub``: the
    framework's ``lib.hub`` module, patched here) called from outside the framework."""
    threading.excepthook = functools.partial(_thread_ended, record)
    for name in ("spawn", "spawn_after"):
        setattr(hub, name, _from_apps(getattr(hub, name), record))


def _thread_ended(record, arguments) -> None:
    """``threading.excepthook``: what ended a thread, unless its hub wrapper recorded it."""
    if arguments.exc_type is SystemExit or getattr(arguments.exc_value, _RECORDED, False):
        return
    _record(record, f"thread {arguments.thread.name if arguments.thread else '?'}",
            arguments.exc_type, arguments.exc_value, arguments.exc_traceback)


def _from_apps(spawn, record):
    """``spawn`` (``hub.spawn(function, ...)`` or ``hub.spawn_after(seconds, function, ...)``)
    whose function, when an app calls it, records what it raises."""
    at = 1 if spawn.__name__ == "spawn_after" else 0

    @functools.wraps(spawn)
    def spawned(*arguments, **keywords):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.split(".")[0] in FRAMEWORKS:
            return spawn(*arguments, **keywords)
        arguments = list(arguments)
        arguments[at] = _guarded(arguments[at], record)
        return spawn(*arguments, **keywords)
    return spawned


def _guarded(function, record):
    @functools.wraps(function)
    def guarded(*arguments, **keywords):
        try:
            return function(*arguments, **keywords)
        except Exception as problem:
            _record(record, f"hub thread {getattr(function, '__qualname__', function)!s}",
                    type(problem), problem, problem.__traceback__)
            setattr(problem, _RECORDED, True)
            raise  # to a joiner that asked for it (raise_error); the hub drops it otherwise
    return guarded


def _record(record, thread: str, kind, problem, trace) -> None:
    """Record what ended ``thread``, on behalf of the app whose code it ran."""
    app, module = _owner(trace)
    text = (f"{thread} of {app} raised\n"
            + "".join(traceback.format_exception(kind, problem, trace)))
    record(app, text, logging.getLogger(module or FALLBACK_LOGGER))


def _owner(trace) -> tuple[str, str | None]:
    """The app (its class when a method of it ran, else its module) and the module of the
    outermost frame of ``trace`` that is neither Python's threading nor this module."""
    for frame, _ in traceback.walk_tb(trace):
        module = frame.f_globals.get("__name__", "")
        if module in ("threading", __name__):
            continue
        owner = frame.f_locals.get("self")
        return (type(owner).__name__ if owner is not None else module), module
    return "an app", None
