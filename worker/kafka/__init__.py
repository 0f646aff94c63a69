"""Adapters for the Kafka clients: the only package that imports confluent-kafka or kafka-python."""
