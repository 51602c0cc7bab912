"""AMQP: the RabbitMQ nodes and connections, the queue topology, publishing with confirms, and
the management reader (queue depths, the management API's queue statistics).
"""
