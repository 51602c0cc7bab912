"""AMQP: the RabbitMQ nodes and connections, the queue topology, publishing with confirms, and
the management reader (queue depths, the management API's queue statistics).

Importing it makes frame decoding total for any message's headers (:mod:`gapless.amqp.tables`),
before any connection is opened.
"""

from gapless.amqp.tables import install as _install_table_decoding

_install_table_decoding()
