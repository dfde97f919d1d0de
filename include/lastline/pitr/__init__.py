"""Point-in-time recovery: the binlog archive, its chain, and the replay to a second or a GTID."""
