"""Spark jobs of the pipeline: each module is a pure transform plus a thin CLI (``main``)."""
