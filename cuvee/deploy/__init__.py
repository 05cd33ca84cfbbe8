"""Launchers: start and stop Cuvee's roles as separate local processes (``cuvee cluster up|down``)."""
