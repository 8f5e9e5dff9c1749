"""rlstream."""
