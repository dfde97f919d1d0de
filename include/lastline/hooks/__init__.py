"""The hooks of the systems lastline talks to, one per system, over the Airflow providers' own (the layer that
reads Airflow connections): :mod:`mariadb` (a MySqlHook whose connection also carries lastline's settings) and
:mod:`ssh` (the SSH provider's connection, as the OpenSSH host lastline streams through)."""
