"""Diagnostics that need no model: synthetic attention inputs and per-recipe error reports."""
