"""The logical restore: its stages (stages, each from its own module), its plan (plans), the checks and the load."""
