"""lastline as an Airflow provider (the `apache_airflow_provider` entry point in pyproject.toml): its connection type
`lastline`, whose form shows lastline's settings as fields of their own, each described, and its hooks.

The fields (`conn-fields`) are built from lastline.core.connection_fields, where every extra of a server's connection is
declared once, and given here with `ui-field-behaviour`, as Airflow 3.2+ reads them without importing the hook; they
are stored in the connection's extras under the same names, so a plain `mysql` connection with those extras works the
same (lastline.core.servers reads them).
"""
from __future__ import annotations

from typing import Any

from lastline.core.connection_fields import form_fields

VERSION = "0.13.0"


CONN_FIELDS: dict[str, dict[str, Any]] = form_fields()


def field_defaults() -> dict[str, Any]:
    """Every field of the connection form with its default: a connection written with all of them shows all of them
    when it is edited in the UI (which shows the fields its extras hold)."""
    return {name: f["schema"].get("default") for name, f in CONN_FIELDS.items()}


def get_provider_info() -> dict[str, Any]:
    """What Airflow's providers manager reads of lastline."""
    return {
        "package-name": "lastline",
        "name": "lastline",
        "description": "Backup and restore pipelines for MariaDB and MySQL: fast, parallel, verified, safe.",
        "versions": [VERSION],
        "connection-types": [{
            "connection-type": "lastline",
            "hook-class-name": "lastline.hooks.mariadb.MariaDbHook",
            "hook-name": "MariaDB / MySQL (lastline)",
            "conn-fields": CONN_FIELDS,
            "ui-field-behaviour": {
                "hidden-fields": ["schema"],
                "relabeling": {"login": "User", "host": "Host"},
                "placeholders": {"host": "127.0.0.1", "port": "3306", "login": "lastline"},
            },
        }],
        "hooks": [{"integration-name": "MariaDB / MySQL (lastline)", "python-modules": ["lastline.hooks.mariadb"]}],
        "notifications": ["lastline.airflow.alerts.Alert"],
    }
