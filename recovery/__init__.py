"""The orphan-recovery loop."""
