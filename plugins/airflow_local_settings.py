"""Airflow's local settings for a lastline deployment (the plugins folder is on Airflow's sys.path).

The cluster policy runs each task that works on a server on that server's queue and pool (the connection's
extras "queue" and "pool"; see lastline.airflow.routing). The processes that start tasks import the task code
once, before they fork (lastline.airflow.preload). A site with local settings of its own adds the lines
below to them.
"""
from lastline.airflow.preload import preload
from lastline.airflow.routing import route as task_instance_mutation_hook

preload()

__all__ = ["task_instance_mutation_hook"]
