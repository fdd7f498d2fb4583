"""The usage plane: usage records published to the usage topic, read back by the fleet follower, and their
metrics."""
