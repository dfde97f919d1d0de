"""MariaDB's binlog event types by the names its log_event.h gives them, for the messages of the readers that refuse
an event (a refusal says "Annotate_rows (event type 160)", never a bare number)."""
from __future__ import annotations

from lastline.pitr.events import (
    BINLOG_CHECKPOINT,
    FORMAT_DESCRIPTION,
    GTID,
    GTID_LIST,
    QUERY,
    QUERY_COMPRESSED,
    ROTATE,
    START_ENCRYPTION,
    STOP,
    XA_PREPARE,
    XID,
)

NAMES = {  # each event type by the name MariaDB's log_event.h gives it, for messages (never "event type 160")
    1: "Start_v3", QUERY: "Query", STOP: "Stop", ROTATE: "Rotate", 5: "Intvar", 6: "Load", 7: "Slave",
    8: "Create_file", 9: "Append_block", 10: "Exec_load", 11: "Delete_file", 12: "New_load", 13: "Rand",
    14: "User_var", FORMAT_DESCRIPTION: "Format_description", XID: "Xid", 17: "Begin_load_query",
    18: "Execute_load_query", 19: "Table_map", 20: "Write_rows (pre-GA)", 21: "Update_rows (pre-GA)",
    22: "Delete_rows (pre-GA)", 23: "Write_rows_v1", 24: "Update_rows_v1", 25: "Delete_rows_v1", 26: "Incident",
    27: "Heartbeat", 28: "Ignorable", 29: "Rows_query", 30: "Write_rows", 31: "Update_rows", 32: "Delete_rows",
    33: "MySQL's Gtid", 34: "MySQL's Anonymous_gtid", 35: "MySQL's Previous_gtids", 36: "Transaction_context",
    37: "View_change", XA_PREPARE: "XA_prepare", 39: "Partial_update_rows", 160: "Annotate_rows",
    BINLOG_CHECKPOINT: "Binlog_checkpoint", GTID: "Gtid", GTID_LIST: "Gtid_list", START_ENCRYPTION: "Start_encryption",
    QUERY_COMPRESSED: "Query_compressed", 166: "Write_rows_compressed_v1", 167: "Update_rows_compressed_v1",
    168: "Delete_rows_compressed_v1", 169: "Write_rows_compressed", 170: "Update_rows_compressed",
    171: "Delete_rows_compressed",
}


def event_name(kind: int) -> str:
    """`Annotate_rows (event type 160)`: an event type by its name, the number after it (which a dump shows)."""
    return f"{NAMES[kind]} (event type {kind})" if kind in NAMES else f"an unknown event (type {kind})"
