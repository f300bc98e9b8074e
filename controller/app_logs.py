"""Where the apps of a run's controller process log, and what becomes of an app that fails.

edgebed's app logs to ``controller.log`` (the process's output); each user's app to a file of
its own beside it (:func:`log_name`). An app that fails to load is logged with its traceback
and ends the process; an exception an app's event handler raises, or one that ends a thread the
app started (:mod:`controller.thread_errors`), is logged and written to ``app_errors.jsonl``,
which fails the run (:mod:`experiments.runner`); the process goes on.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import traceback
from pathlib import Path

from topologies.model import EDGEBED_APP_MODULE

APP_ERRORS = "app_errors.jsonl"  # one JSON object a line: app, text (with the traceback)
FORMAT = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


def log_name(app: str) -> str:
    """The log file of a user's app: its file's stem or its module's name, with ``.log``."""
    return (Path(app).stem if app.endswith(".py") else app) + ".log"


class AppLogs:
    """The log files of the apps os-ken's (or Ryu's) app ``manager`` loads, in
    ``directory``, and the exceptions their event handlers raise."""

    def __init__(self, directory: Path, manager):
        self.directory = directory
        self.manager = manager

    def load(self, app: str) -> None:
        """Load ``app``, its loggers sent to its own file (a user's app) and its event
        handlers watched; a failure to load is written there too, and raised."""
        manager = self.manager
        own = None if app == EDGEBED_APP_MODULE else self._file_handler(log_name(app))
        try:
            manager.load_apps([app])
            app_class = manager.applications_cls.get(app)
            if app_class is None:
                raise ImportError(f"{app} defines no app class (a subclass of Ryu's "
                                  "app_manager.RyuApp, os-ken's OSKenApp)")
        except Exception:  # raised on: the process's output gets the traceback
            if own is not None:
                own.stream.write(f"controller app {app} failed to load\n"
                                 f"{traceback.format_exc()}")
                own.flush()
            raise
        app_logger = getattr(app_class, "LOGGER_NAME", app_class.__name__)
        logger_names = {app_logger, app_class.__module__}
        if own is not None:
            for name in logger_names:
                logger = logging.getLogger(name)
                logger.addHandler(own)
                logger.setLevel(logging.INFO)
                logger.propagate = False  # its own file, not edgebed's log
        self._watch_handlers(app_class, logging.getLogger(app_logger))

    def _watch_handlers(self, app_class, logger: logging.Logger) -> None:
        """Every event handler of ``app_class`` records what it raises in ``app_errors.jsonl``
        and the app's log (os-ken's own report of it is lost under its eventlet hub)."""
        for name, method in inspect.getmembers(app_class, inspect.isfunction):
            if hasattr(method, "callers"):  # set_ev_cls marks event handlers so
                setattr(app_class, name, self._watched(app_class.__name__, method, logger))

    def _watched(self, app_name: str, handler, logger: logging.Logger):
        @functools.wraps(handler)
        def watched(instance, event):
            try:
                return handler(instance, event)
            except Exception:
                self.record(app_name, f"{app_name}.{handler.__name__} raised on "
                            f"{type(event).__name__}\n{traceback.format_exc()}", logger)
        return watched

    def record(self, app_name: str, text: str, logger: logging.Logger) -> None:
        """An exception of app ``app_name`` (``text``: where, and its traceback), logged to
        ``logger`` and written to ``app_errors.jsonl``, which fails the run."""
        logger.error("%s", text)
        with open(self.directory / APP_ERRORS, "a") as stream:
            stream.write(json.dumps({"app": app_name, "text": text}) + "\n")

    def _file_handler(self, name: str) -> logging.Handler:
        handler = logging.FileHandler(self.directory / name)
        handler.setFormatter(FORMAT)
        return handler
