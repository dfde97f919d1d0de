"""The logical backup's format, shared by the backup and the restore: the TSV dialect and row hashes, chunk files, schema.json, the SQL lexer that reads it as the server does, the plans."""
