"""The logical backup: its stages (stages), its plan (plans), one snapshot on many connections (snapshot), the dump."""
