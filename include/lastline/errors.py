"""One small family of errors whose messages say what happened, to what, and what to do next."""
from __future__ import annotations


class LastlineError(Exception):
    """Base class of every error lastline raises on purpose."""


class PreflightError(LastlineError):
    """A check before any change failed: nothing was touched."""


class ProtectedTargetError(PreflightError):
    """The target is marked `protected` (production): lastline never writes into it."""


class PipelineError(LastlineError):
    """A stage of an OS pipeline failed; the message names the stage, its exit status and stderr tail."""


class IntegrityError(LastlineError):
    """Data read back does not match what the manifest promised (checksum, size, rows)."""


class StorageError(LastlineError):
    """A destination could not be read or written."""


class ServerError(LastlineError):
    """A database server refused, could not be reached, or did not start or stop."""


class ReplicationError(LastlineError):
    """Replication could not be set up, did not catch up, or could not be detached."""
