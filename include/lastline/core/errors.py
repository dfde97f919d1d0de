"""One small family of errors whose messages say what happened, to what, and what to do next.

Two kinds: a `Refusal` (a protected target, a missing or corrupt backup, a checksum mismatch, a bad
Param or connection) cannot be fixed by waiting, so the task fails at once without retries (Airflow's
AirflowFailException); every other LastlineError (a lost connection, a cut stream, S3 throttling)
is transient and retries as the DAG says.
"""
from __future__ import annotations

try:  # the Task SDK's "fail now, do not retry"
    from airflow.sdk.exceptions import AirflowFailException as _FailNow
except ImportError:  # pragma: no cover - the package is usable without Airflow
    class _FailNow(Exception):  # type: ignore[no-redef]
        """Stands in for AirflowFailException where Airflow is not installed."""


class LastlineError(Exception):
    """Base class of every error lastline raises on purpose."""


class Refusal(LastlineError, _FailNow):
    """An error retrying cannot fix: the task fails at once, with the same clear message."""


class ConfigError(Refusal):
    """A Param, a connection or an installation is wrong: say which and how to fix it."""


class PreflightError(Refusal):
    """A check before any change failed: nothing was touched."""


class ProtectedTargetError(PreflightError):
    """The target is marked `protected` (production): lastline never writes into it."""


class PipelineError(LastlineError):
    """A stage of an OS pipeline failed; the message names the stage, its exit status and stderr tail."""


class IntegrityError(Refusal):
    """Data read back does not match what the manifest promised (checksum, size, rows)."""


class StorageError(LastlineError):
    """A destination could not be read or written."""


class ServerError(LastlineError):
    """A database server refused, could not be reached, or did not start or stop."""


class AccessDenied(ConfigError, ServerError):
    """The server refused the connection's credentials: fix the connection (no retry can)."""


class ReplicationError(LastlineError):
    """Replication could not be set up, did not catch up, or could not be detached."""
