"""High-availability tier: private replicated RabbitMQ and PostgreSQL clusters started by the
tests themselves (never the shared services), a node of each lost under load."""
