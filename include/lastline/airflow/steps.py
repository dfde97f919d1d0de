"""Stage functions as Airflow tasks: the one place where XCom's plain JSON meets lastline's typed objects.

A stage function takes its typed plan and results (core.plans.Plan, Result: frozen dataclasses) and returns a typed
result; `step(fn)` makes it a task whose arguments, arriving from XCom as dicts, are turned back into the types the
function's annotations name, and whose typed return value is stored as its dict form. A parameter annotated `Conf`
(core.plans) that the task is not given receives the run's Params as a Conf (Airflow injects `params` into a callable
whose signature names it: the task's signature gains it); given a dict (a drill's restore conf), it gets that dict's
Conf. The stages below never see XCom, and XCom never holds anything but small JSON.

`task` is the Task SDK's, every callable it makes a task of going through failures.explained (a failure's log
opens with its whole reason); lastline's DAG files and task groups take `task` and `step` from here.
"""
from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from airflow.sdk import task as sdk_task

from lastline.airflow.failures import explained
from lastline.core.plans import Conf, Typed, plain


def _typed(hint: Any) -> type[Typed] | None:
    """The Typed class an annotation names (`Plan`, `Result | None`), or None."""
    if isinstance(hint, type) and issubclass(hint, Typed):
        return hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next((a for a in typing.get_args(hint) if isinstance(a, type) and issubclass(a, Typed)), None)
    return None


def _names_conf(hint: Any) -> bool:
    """Whether an annotation names Conf: `Conf`, or a union with it (`Conf | Mapping[str, Any]`); not a container of
    Confs."""
    return hint is Conf or typing.get_origin(hint) in (typing.Union, types.UnionType) and Conf in typing.get_args(hint)


def xcom_form(value: Any) -> Any:
    """A return value as XCom stores it: typed objects as their dicts (inside lists and dicts too)."""
    return plain(value)


def typed_call(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` taking dicts where its annotations name typed objects, the run's Params where they name a Conf, and
    returning its result's XCom form."""
    hints = typing.get_type_hints(inspect.unwrap(fn))  # a decorated stage: its own annotations, in its own module
    signature = inspect.signature(fn)
    kinds = {name: kind for name in signature.parameters if (kind := _typed(hints.get(name)))}
    confs = [name for name in signature.parameters if _names_conf(hints.get(name))]

    @functools.wraps(fn)
    @explained
    def call(*args: Any, **kwargs: Any) -> Any:
        params = kwargs.pop("params", None) if confs else None
        bound = signature.bind_partial(*args, **kwargs)
        for name, kind in kinds.items():
            if isinstance(bound.arguments.get(name), Mapping):
                bound.arguments[name] = kind.of(bound.arguments[name])
        for name in confs:
            given = bound.arguments.get(name)
            bound.arguments[name] = Conf(params if given is None else given)
        return xcom_form(fn(*bound.args, **bound.kwargs))

    if confs:  # Airflow passes a context value to a callable whose signature names it: here, the run's Params
        if "params" in signature.parameters:
            raise TypeError(f"{fn.__name__}: a stage's Params are its Conf parameter ({', '.join(confs)}); it cannot "
                            "also take `params`")
        names = list(signature.parameters)
        after = [p.name for p in list(signature.parameters.values())[names.index(confs[0]) + 1:]
                 if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if after:  # the Conf parameter gets a default (None: the run's Params), so nothing required may follow it
            raise TypeError(f"{fn.__name__}: its Conf parameter {confs[0]!r} is followed by required parameters "
                            f"({', '.join(after)}): put them first, or make them keyword-only, to make it a step")
        parameters = [p.replace(default=None) if p.name in confs else p for p in signature.parameters.values()]
        keyword = inspect.Parameter("params", inspect.Parameter.KEYWORD_ONLY, default=None)
        at = next((i for i, p in enumerate(parameters) if p.kind == p.VAR_KEYWORD), len(parameters))
        call.__signature__ = signature.replace(parameters=[*parameters[:at], keyword, *parameters[at:]])  # type: ignore[attr-defined]
    return call


def step(fn: Callable[..., Any], *, around: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
         **kw: Any) -> Any:
    """A stage function as a task of this layer (`task(**kw)`): XComArgs (or values) in, an XComArg out. `around`: a
    wrapper of the typed call, seeing its XCom form (approval.deciding)."""
    call = typed_call(fn)
    return sdk_task(**kw)(around(call) if around else call)


class _Explained:
    """A Task SDK task decorator (`task`, `task.branch`, `task.sensor`, ...) whose callables log their failure's
    reason whole (failures.explained): `@task`, `@task(**kw)`, `@task.branch`, `@task.sensor(**kw)` as usual."""

    def __init__(self, decorator: Any) -> None:
        self._decorator = decorator

    def __call__(self, python_callable: Callable[..., Any] | None = None, **kw: Any) -> Any:
        if python_callable is None:
            return lambda fn: self._decorator(explained(fn), **kw)
        return self._decorator(explained(python_callable), **kw)

    def __getattr__(self, name: str) -> _Explained:
        return _Explained(getattr(self._decorator, name))


task: Any = _Explained(sdk_task)
