"""The estimator session of a Dask worker process, shared by the worker's threads.

``dask worker`` runs several tasks at once, in threads; a thread starts without a current session
(:mod:`harness.session`), so the worker's session is held by a worker plugin (:class:`SessionPlugin`,
registered by the driver under :data:`SESSION_PLUGIN`): its lifetime is the worker process's, and every task
the worker runs uses it (its memos and the running top K of each search, :func:`harness.search.run.running_top_k`).
"""

from __future__ import annotations

from distributed import WorkerPlugin, get_worker

from harness import session

#: The name the plugin is registered under.
SESSION_PLUGIN = "harness-session"


class SessionPlugin(WorkerPlugin):
    """Gives each worker process one :class:`harness.session.Session` (made when the worker starts)."""

    def setup(self, worker) -> None:
        self.session = session.Session()


def worker_session() -> session.Session | None:
    """The session of the Dask worker running this task, or None outside a worker (or without the plugin)."""
    try:
        worker = get_worker()
    except ValueError:
        return None
    plugin = worker.plugins.get(SESSION_PLUGIN)
    return getattr(plugin, "session", None)
