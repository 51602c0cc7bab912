"""The demo: a whole system on one machine, with a realistic mixed load."""
