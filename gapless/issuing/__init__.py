"""The issuing steps the worker and recovery share: routing, rendering, channel correction.
"""
