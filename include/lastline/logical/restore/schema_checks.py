"""schema.json is untrusted input: every statement a restore runs from it is read on tokens, as the server's
lexer reads it (logical.format.sql_text), and checked to be the CREATE of its kind and name: one statement, no
other object, no other database; a table only as SHOW CREATE TABLE prints it (schema_tables), other objects as
their kind's grammar says (schema_definers), accounts only their own (schema_grants), session values only names
(schema_session). A second line of defence: the first is the restore's account, which can touch only the
databases being restored.
"""
from __future__ import annotations

from collections.abc import Collection

from lastline.core.errors import IntegrityError
from lastline.logical.format import sql_text
from lastline.logical.restore.schema_definers import KIND_WORDS, check_program
from lastline.logical.restore.schema_grants import checked_grants
from lastline.logical.restore.schema_session import database_create, session_mode, session_name
from lastline.logical.restore.schema_tables import check_sequence, check_table
from lastline.logical.restore.schema_tokens import BadStatement, never_run, refuse


def checked_create(kind: str, obj: dict, databases: Collection[str] | None = None,
                   engines: dict[tuple[str, str], frozenset[str]] | None = None) -> str:
    """The CREATE statement of a schema.json object, refused (IntegrityError) unless it creates that very
    object as the server prints it: one statement, the object's own name and database (a trigger: on its own
    table); a table only with allowed definitions, engines and options, and foreign keys into its own database
    or one of `databases` (the restore's; None: its own only). Objects are read under their own sql_mode.
    `engines`: a table's or sequence's engines as its CREATE names them are put there, by (schema, name)."""
    create = obj.get("create")
    if not isinstance(create, str) or not isinstance(obj.get("name"), str) or not isinstance(obj.get("schema"), str):
        raise IntegrityError(f"schema.json: a {kind[:-1]} entry without a name, database or statement: {str(obj)[:200]}")
    try:
        if kind in ("tables", "sequences"):  # no copy of `databases` per table: read only at a `db`.
            named = check_table(create, obj, databases or ()) if kind == "tables" else check_sequence(create, obj)
            if engines is not None:
                engines[(obj["schema"], obj["name"])] = named
        elif kind in KIND_WORDS:
            session_mode(obj.get("sql_mode"))
            tokens = never_run(sql_text.tokenize(create, **sql_text.mode_options(obj.get("sql_mode"))))
            check_program(kind, sql_text.significant(tokens), obj)
        else:
            raise BadStatement(f"is of a kind lastline does not restore ({kind})")
    except (BadStatement, sql_text.SqlTextError) as e:
        problem = str(e) if isinstance(e, BadStatement) else f"cannot be read as the server reads it: {e}"
        raise refuse(f"{kind[:-1]} {obj['schema']}.{obj['name']}", problem) from None
    return create



def validate_schema(schema: dict, databases: list[str], grants: bool = False) -> dict[tuple[str, str], frozenset[str]]:
    """Check every statement a restore of `databases` would run from schema.json (before anything is touched).
    Returns the engines each table's and sequence's CREATE names, by (schema, name), read on the checked tokens."""
    scope = frozenset(databases)  # asked once per object: a list would cost objects x databases
    engines: dict[tuple[str, str], frozenset[str]] = {}
    for d in schema.get("databases", []):
        if d.get("name") in scope:
            database_create(d)
    for kind in ("tables", "sequences", "views", "triggers", "routines", "events"):
        for obj in schema.get(kind, []):
            if obj.get("schema") in scope:
                checked_create(kind, obj, scope, engines)
                session_name(obj.get("character_set_client"), "character_set_client")
                session_name(obj.get("collation_connection"), "collation_connection")
    if grants:
        for g in schema.get("grants", []):
            checked_grants(g)
    return engines

