"""gapless: unique, gap-free legal document numbers issued from queues."""

__version__ = "0.1.0"
