"""segment."""
