"""What backups and the replication pipelines share about a replica: its flavour and statements, a backup taken
from it (lag, the SQL thread paused, the primary's coordinates) and the record of every pause."""
