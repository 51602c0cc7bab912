"""The RabbitMQ consumer and the just-in-time issuing flow."""
