"""core.errors: which errors fail a task at once (a Refusal: retrying cannot fix it) and which retry."""
from __future__ import annotations

import pytest

from lastline.core.errors import (
    AccessDenied,
    ConfigError,
    IntegrityError,
    LastlineError,
    PipelineError,
    PreflightError,
    ProtectedTargetError,
    Refusal,
    ReplicationError,
    ServerError,
    StorageError,
)


@pytest.mark.parametrize(("error", "refused"), [
    (ConfigError, True), (PreflightError, True), (ProtectedTargetError, True), (IntegrityError, True),
    (AccessDenied, True), (PipelineError, False), (StorageError, False), (ServerError, False), (ReplicationError, False),
], ids=["config", "preflight", "protected-target", "integrity", "access-denied", "pipeline", "storage", "server",
        "replication"])
def test_refusals_fail_at_once_the_rest_retries(error, refused):
    assert issubclass(error, LastlineError)
    assert issubclass(error, Refusal) is refused


def test_a_refusal_is_airflows_fail_now_where_airflow_is_installed():
    fail_now = pytest.importorskip("airflow.sdk.exceptions").AirflowFailException
    assert issubclass(Refusal, fail_now) and not issubclass(StorageError, fail_now)


def test_wrong_credentials_are_both_a_config_error_and_a_server_error():
    """Caught as a server that refused, but never retried: no retry fixes a password."""
    with pytest.raises(ServerError, match="denied"):
        raise AccessDenied("denied")
    assert issubclass(ProtectedTargetError, PreflightError)
