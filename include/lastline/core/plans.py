"""Typed plans: what a preflight decides, built once from a run's Params and read as attributes after.

A plan crosses task boundaries through XCom as its plain-dict form (`to_dict`); each task turns it back
with `Plan.of`, so a task reads `plan.parallel`, never `conf.get("parallel")`. `Conf` reads the Params
with one set of coercions (a trigger form, the CLI's `-c` JSON and the REST API send different types).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, cast, overload

from lastline.core.errors import ConfigError

P = TypeVar("P", bound="Typed")
# the defaults every DAG shares, defined once: the plans, the preflights and the Params (lastline.airflow.params) read them
PARALLEL = 2  # how many work at once (lanes, dump workers, mariabackup threads)
MAX_REPLICA_LAG = 300.0  # seconds a replica may be behind before a backup of it is refused
KEEP = 7  # complete backups a prune keeps
_TRUE = {"1", "true", "yes", "on"}


def as_bool(value: Any) -> bool:
    """A Param or a connection extra as a boolean (JSON true, "true", "yes", 1...)."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE


_FALSE = {"0", "false", "no", "off"}


def safety_flag(value: Any, name: str, default: bool | None, of: str = "the connection extra") -> bool | None:
    """A safety setting of a connection (protected, approval...) or a step's switch (`of`: "the Param"): true or false
    as JSON or words, empty for the default; anything else is refused, never read as false (a typo must not leave
    production unprotected, nor skip a step)."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ConfigError(f"{of} {name} is {value!r}: write true or false (or leave it empty).")


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(value: Any) -> int:
    """Bytes from `1073741824`, `1G`, `1 GiB`, `256M`, `1.5g` (binary units); a ValueError otherwise (negative,
    not a number, too large)."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int | float):
        number, unit = float(value), ""
    else:
        text = str(value).strip().upper().replace(" ", "")
        for suffix in ("IB", "B"):
            if text.endswith(suffix) and text[:-len(suffix)][-1:] in "KMGT":
                text = text[:-len(suffix)]
                break
        unit = text[-1:] if text[-1:] in "KMGT" else ""
        number = float(text[:len(text) - len(unit)])
    if not 0 <= number < 1 << 60:  # negative, inf, nan
        raise ValueError(value)
    return int(number * _UNITS[unit])


def human_size(n: int) -> str:
    """`1G`, `256M`, `1536K`: the largest binary unit that divides `n` (bytes otherwise)."""
    for unit in ("T", "G", "M", "K"):
        if n and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}"
    return str(n)


@dataclasses.dataclass(frozen=True)
class Typed:
    """A frozen dataclass of JSON-able fields that crosses task boundaries: the Airflow layer turns it into its XCom
    form (`to_dict`) and back (`of`); the stages below only ever see the dataclass."""

    def to_dict(self) -> dict[str, Any]:
        """The XCom form: a plain dict of the fields."""
        return dataclasses.asdict(self)

    @classmethod
    def of(cls: type[P], value: P | Mapping[str, Any]) -> P:
        """The plan itself, or the plan of its dict form (from XCom); unknown or missing fields are named."""
        if isinstance(value, cls):
            return value
        assert isinstance(value, Mapping), f"{cls.__name__}.of takes a plan or its dict form"
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ConfigError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}: a plan from another lastline version? Re-run from preflight.")
        nested = _nested(cast(type, cls))
        if flat := sorted(k for k in nested if k in value and not isinstance(value[k], Mapping | nested[k])):
            raise ConfigError(f"{cls.__name__}: {', '.join(flat)} must be typed objects (their JSON form), not "
                              f"{', '.join(type(value[k]).__name__ for k in flat)}: a plan from another lastline version? "
                              "Re-run from preflight.")
        try:
            return cls(**{k: nested[k].of(v) if k in nested and isinstance(v, Mapping) else v for k, v in value.items()})
        except TypeError as exc:
            raise ConfigError(f"{cls.__name__}: {exc}; re-run from preflight.") from exc


@functools.cache
def _nested(cls: type) -> dict[str, type[Typed]]:
    """The fields of `cls` that are typed themselves (a plan's BackupRef): their XCom form is turned back too."""
    hints = typing.get_type_hints(cls)
    return {f.name: hint for f in dataclasses.fields(cls)
            if isinstance(hint := hints.get(f.name), type) and issubclass(hint, Typed)}


def plain(value: Any) -> Any:
    """`value` as JSON-able data: typed objects (and other dataclasses) as their dicts, inside lists and dicts too (the
    form XCom stores, and a report records)."""
    if isinstance(value, Typed):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


@dataclasses.dataclass(frozen=True)
class Plan(Typed):
    """What a preflight decided, read by every later task of the run."""


@dataclasses.dataclass(frozen=True)
class Result(Typed):
    """What a stage did, read by the tasks after it (its report, its teardown)."""


class Conf:
    """A run's Params, read with one set of coercions; a bad value is a ConfigError naming the Param. The Airflow layer
    (airflow.steps) hands a stage the run's Params as a Conf; a stage reads `Conf(conf)`, so a test's dict is one too."""

    raw: dict[str, Any]  # the Params as given

    def __init__(self, params: Conf | Mapping[str, Any] | None) -> None:
        self.raw = dict(params.raw if isinstance(params, Conf) else params or {})

    def replace(self, **values: Any) -> Conf:
        """These Params with some values replaced (a backup's Asset event naming the backup to restore)."""
        return Conf({**self.raw, **values})

    @overload
    def text(self, name: str) -> str | None: ...

    @overload
    def text(self, name: str, default: str) -> str: ...

    @overload
    def text(self, name: str, default: None) -> str | None: ...

    def text(self, name: str, default: str | None = None) -> str | None:
        """A string Param; empty means the default."""
        value = self.raw.get(name)
        return str(value) if value not in (None, "") else default

    def required(self, name: str) -> str:
        """A string Param that must be set."""
        value = self.text(name)
        if not value:
            raise ConfigError(f"the Param {name} is required.")
        return value

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        """A Param that is one of `choices`."""
        value = self.text(name, default) or default
        if value not in choices:
            raise ConfigError(f"the Param {name} is {value!r}; it must be one of {', '.join(choices)}.")
        return value

    def integer(self, name: str, default: int, minimum: int | None = None) -> int:
        """An integer Param (0, None and "" mean the default)."""
        value = self._number(name, default, int)
        if minimum is not None and value < minimum:
            raise ConfigError(f"the Param {name} is {value}; it must be at least {minimum}.")
        return value

    def number(self, name: str, default: float, minimum: float | None = None, maximum: float | None = None) -> float:
        """A numeric Param (None and "" mean the default; 0 is a value: no cap, no grace)."""
        out = self._number(name, default, float, zero_is_default=False)
        if minimum is not None and out < minimum:
            raise ConfigError(f"the Param {name} is {out}; it must be at least {minimum}.")
        if maximum is not None and out > maximum:
            raise ConfigError(f"the Param {name} is {out}; it may be at most {maximum}.")
        return out

    def size(self, name: str, default: int) -> int:
        """A size in bytes: an integer, or a number with a unit (`1G`, `256M`, `1.5GiB`, `512k`; 0, None and "" mean
        the default)."""
        value = self.raw.get(name)
        if value is None or value == "" or value == 0:
            return default
        try:
            return parse_size(value) or default  # 0 (or "0G") means the default, as an empty field does
        except ValueError:
            raise ConfigError(f"the Param {name} is {value!r}: a size is a number of bytes or a number with a unit "
                              "(K, M, G, T: 1G, 256M).") from None

    def optional_integer(self, name: str) -> int | None:
        """An integer Param that may be unset (None)."""
        value = self.raw.get(name)
        return None if value in (None, "", 0) else self._number(name, 0, int)

    def flag(self, name: str, default: bool = False) -> bool:
        """A boolean Param (unset: the default)."""
        value = self.raw.get(name)
        return default if value is None or value == "" else as_bool(value)

    def names(self, name: str) -> list[str]:
        """A list-of-names Param (a JSON list, or one comma-separated string), without blanks or repeats."""
        value = self.raw.get(name) or []
        items = value.split(",") if isinstance(value, str) else list(value)
        return list(dict.fromkeys(str(v).strip() for v in items if str(v).strip()))

    def _number(self, name: str, default: Any, kind: type, zero_is_default: bool = True) -> Any:
        value = self.raw.get(name)
        if value is None or value == "" or (value == 0 and zero_is_default):
            return default
        try:
            out = kind(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ConfigError(f"the Param {name} is {value!r}, not a number.") from exc
        if isinstance(value, bool) or not math.isfinite(out):  # NaN passes every comparison, inf every ceiling
            raise ConfigError(f"the Param {name} is {value!r}: give a finite number.")
        return out


RunParams = Conf | Mapping[str, Any]
"""A run's Params as a stage takes them: the Conf the Airflow layer hands it (airflow.steps), or their dict (a test, a
drill's restore conf); the stage reads `Conf(conf)`."""
