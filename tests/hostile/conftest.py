"""The hostile-input tier (see test_hostile_messages.py and strategies.py)."""
