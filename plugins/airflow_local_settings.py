"""Airflow's local settings for a lastline deployment (the plugins folder is on Airflow's sys.path).

The cluster policy runs each task that works on a server on that server's queue and pool (the connection's
extras "queue" and "pool"; see lastline.airflow.routing). A site with local settings of its own adds the
import below to them.
"""
from lastline.airflow.routing import route as task_instance_mutation_hook

__all__ = ["task_instance_mutation_hook"]
