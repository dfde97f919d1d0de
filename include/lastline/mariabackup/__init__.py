"""What the physical backup and restore and the replica rebuild share: mariabackup's commands and the facts read
from its output, the options its prepare reads, and a restore target's datadir (checked, prepared, started)."""
