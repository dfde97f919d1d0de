"""lastline: fast, verified backup and restore pipelines for MariaDB and MySQL."""
