"""backup_verify: every complete backup of a destination and its binlog archive read back against what lastline signed."""
