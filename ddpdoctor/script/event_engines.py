"""Event-driven training engines: which calls make an engine, run it, and register its handlers.

pytorch-ignite's ``Engine(process_function)`` calls ``process_function(engine, batch)`` for every batch
of ``engine.run(data)`` (ignite/engine/engine.py), and calls the handlers registered with
``engine.add_event_handler(event, handler, *args)`` or ``@engine.on(event)`` with ``(engine, *args)``
when the event fires during ``run``. ``create_supervised_trainer(model, ...)`` and
``create_supervised_evaluator(model, ...)`` (ignite/engine/__init__.py) build an engine whose step
calls ``model`` on the batch. So a handler registered on some ranks only runs on those ranks only,
whatever runs the engine: the per-rank walk calls it where it is registered.

Only ignite's own names count (by import); an ``Engine`` of another library is unknown.
"""

from __future__ import annotations

ENGINE_CLASS = "Engine"
SUPERVISED_FACTORIES = frozenset(("create_supervised_trainer", "create_supervised_evaluator"))
RUN = "run"
ADD_HANDLER = "add_event_handler"
ON = "on"
METHODS = frozenset((RUN, ADD_HANDLER, ON))


def is_ignite(qualname: str | None) -> bool:
    """``ignite.engine.Engine`` and the like: a name imported from pytorch-ignite."""
    return bool(qualname) and qualname.split(".", 1)[0] == "ignite"


def makes_engine(qualname: str | None) -> str | None:
    """ "process" for ``Engine(fn)``, "supervised" for ``create_supervised_*(model, ...)``, else None."""
    if not is_ignite(qualname):
        return None
    last = qualname.rsplit(".", 1)[-1]
    if last == ENGINE_CLASS or last == "DeterministicEngine":
        return "process"
    if last in SUPERVISED_FACTORIES:
        return "supervised"
    return None
