"""Where the apps of a run's controller process log, and what becomes of an app that fails.

edgebed's app logs to ``controller.log`` (the process's output); each user's app to a file of
its own beside it (:func:`log_name`). An app that fails to load is logged with its traceback
and ends the process; an exception an app's event handler raises (os-ken logs it and goes on)
is written to ``app_errors.log`` as well, which fails the run (:mod:`experiments.runner`).
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

from topologies.model import EDGEBED_APP_MODULE

APP_ERRORS = "app_errors.log"
FORMAT = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


def log_name(app: str) -> str:
    """The log file of a user's app: its file's stem or its module's name, with ``.log``."""
    return (Path(app).stem if app.endswith(".py") else app) + ".log"


class AppLogs:
    """The log files of the apps os-ken's (or Ryu's) app ``manager`` loads, in
    ``directory``."""

    def __init__(self, directory: Path, manager):
        self.directory = directory
        self.manager = manager
        self.by_app_name: dict[str, logging.Handler] = {}  # app class name -> its log
        # The app manager's module logs the exception a handler raised, the app's name first.
        logging.getLogger(type(manager).__module__).addHandler(HandlerFailures(self))

    def load(self, app: str) -> None:
        """Load ``app``, its loggers sent to its own file (a user's app); a failure to load is
        written there too, and raised."""
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
        if own is None:
            return
        app_name = app_class.__name__
        self.by_app_name[app_name] = own
        for name in {getattr(app_class, "LOGGER_NAME", app_name), app_class.__module__}:
            logger = logging.getLogger(name)
            logger.addHandler(own)
            logger.setLevel(logging.INFO)
            logger.propagate = False  # its own file, not edgebed's log

    def _file_handler(self, name: str) -> logging.Handler:
        handler = logging.FileHandler(self.directory / name)
        handler.setFormatter(FORMAT)
        return handler


class HandlerFailures(logging.Handler):
    """Each exception an app's event handler raised, to ``app_errors.log`` and the app's own
    log."""

    def __init__(self, logs: AppLogs):
        super().__init__(logging.ERROR)
        self.logs = logs
        self.setFormatter(FORMAT)

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is None:
            return
        with open(self.logs.directory / APP_ERRORS, "a") as errors:
            errors.write(self.format(record) + "\n")
        app_name = record.args[0] if isinstance(record.args, tuple) and record.args else None
        own = self.logs.by_app_name.get(app_name)
        if own is not None:
            own.handle(record)
